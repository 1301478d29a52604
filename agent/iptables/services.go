package iptables

import (
	"cmp"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"lockstep.dev/lockstep/agent/policy"
)

// Service chains (see doc.go, "Services"). The nat chains all start with
// svcPrefix: the dataplane owns exactly those in the nat table, where the
// masquerade chain of agent/masquerade lives too.
const (
	svcPrefix    = "LOCKSTEP-SVC-"
	chainSvcPods = "LOCKSTEP-SVC-PODS"    // nat, from PREROUTING: -i <if> per endpoint
	chainSvcAll  = "LOCKSTEP-SVC-ALL"     // nat: one jump per frontend with backends
	chainHairpin = "LOCKSTEP-SVC-HAIRPIN" // nat, from POSTROUTING: a pod reaching itself
	chainReject  = "LOCKSTEP-REJECT"      // filter: refuse a frontend without backends
	svcComment   = "lockstep: Services"
	noepTag      = "noep"
)

// natHooks are the built-in nat chains the dataplane jumps from when it
// translates Services, each with one rule inserted first.
var natHooks = [...]struct{ builtin, chain string }{
	{"PREROUTING", chainSvcPods},
	{"POSTROUTING", chainHairpin},
}

// isServiceChain reports whether a nat chain is the dataplane's.
func isServiceChain(name string) bool { return strings.HasPrefix(name, svcPrefix) }

// isNATDispatch reports whether a nat chain holds rules in no particular
// order (one per endpoint, frontend or hairpin address), which Apply
// edits rule by rule.
func isNATDispatch(chain string) bool {
	return chain == chainSvcPods || chain == chainSvcAll || chain == chainHairpin
}

// noepSetName is the hash:ip,port set of the frontends of family f that
// have no backend (kube-proxy's "has no endpoints"), which the endpoints'
// egress chains refuse. A frontend without a backend on this node only
// (policy.ServiceEntry.NoLocalBackend, internalTrafficPolicy Local) is not
// in it: kube-proxy drops its connections ("has no local endpoints"),
// and whatever lockstep's chains decide on the ClusterIP, a connection
// they let through meets that DROP.
func noepSetName(m Mode, f Family) string { return setPrefix(m, f) + noepTag }

// svcChainName is the nat chain that translates fr: LOCKSTEP-SVC- and 12
// base32 digits of the SHA-256 of its text.
func svcChainName(fr policy.ServiceFrontend) string {
	return svcPrefix + strings.ToUpper(shortHash(frontendText(fr)))
}

// affinityList is the xt_recent list of the clients whose connections to
// fr went to b, for ClientIP affinity. Lists are one namespace per network
// namespace, shared by both iptables modes; the name is the frontend's and
// the backend's, so both modes would agree on what it means.
func affinityList(fr policy.ServiceFrontend, b policy.ServiceBackend) string {
	return "lockstep-" + shortHash(frontendText(fr)+">"+backendText(b))
}

// frontendText is a frontend as a hash:ip,port member: "10.96.0.10,udp:53",
// "fd00::a,tcp:443".
func frontendText(fr policy.ServiceFrontend) string {
	return fr.Addr.Unmap().String() + "," + protoName[fr.Proto] + ":" + strconv.Itoa(int(fr.Port))
}

func backendText(b policy.ServiceBackend) string {
	return netip.AddrPortFrom(b.Addr.Unmap(), b.Port).String()
}

// parseFrontend is the inverse of frontendText, for ipset save output.
func parseFrontend(s string) (policy.ServiceFrontend, error) {
	i := strings.LastIndexByte(s, ',')
	if i < 0 {
		return policy.ServiceFrontend{}, fmt.Errorf("parse %q: want ADDRESS,PROTO:PORT", s)
	}
	a, err := netip.ParseAddr(s[:i])
	if err != nil {
		return policy.ServiceFrontend{}, fmt.Errorf("parse %q: %w", s, err)
	}
	proto, port, ok := strings.Cut(s[i+1:], ":")
	n, err := strconv.ParseUint(port, 10, 16)
	if !ok || err != nil {
		return policy.ServiceFrontend{}, fmt.Errorf("parse %q: bad port", s)
	}
	for num, name := range protoName {
		if name == proto {
			return policy.ServiceFrontend{Addr: a.Unmap(), Port: uint16(n), Proto: num}, nil
		}
	}
	return policy.ServiceFrontend{}, fmt.Errorf("parse %q: protocol %q", s, proto)
}

func compareFrontends(a, b policy.ServiceFrontend) int {
	return cmp.Or(a.Addr.Compare(b.Addr), cmp.Compare(a.Proto, b.Proto), cmp.Compare(a.Port, b.Port))
}

// writeFrontendUpdates writes the ipset restore lines that turn old (nil:
// a new, empty set) into s, a hash:ip,port set.
func writeFrontendUpdates(b *strings.Builder, name string, old, s *ipSet) {
	for _, fr := range sortedFrontends(s.frontends) {
		if old != nil {
			if _, ok := old.frontends[fr]; ok {
				continue
			}
		}
		b.WriteString("add " + name + " " + frontendText(fr) + "\n")
	}
	if old == nil {
		return
	}
	for _, fr := range sortedFrontends(old.frontends) {
		if _, ok := s.frontends[fr]; !ok {
			b.WriteString("del " + name + " " + frontendText(fr) + "\n")
		}
	}
}

func sortedFrontends[V any](m map[policy.ServiceFrontend]V) []policy.ServiceFrontend {
	out := make([]policy.ServiceFrontend, 0, len(m))
	for fr := range m {
		out = append(out, fr)
	}
	slices.SortFunc(out, compareFrontends)
	return out
}

// svcRender is one frontend's rendered translation, kept between applies
// so that a frontend whose entry did not change is not rendered again.
type svcRender struct {
	entry *policy.ServiceEntry
	chain string // LOCKSTEP-SVC-<hash>
	// jump is the frontend's rule in LOCKSTEP-SVC-ALL and rules those of
	// its chain; both empty without backends or translation.
	jump  string
	rules []string
}

// svcPlan is what the Services of one Desired add to a plan, by family
// index: the set of frontends without backends (nil when the family has
// no frontend at all) and the nat chains (nil when the dataplane does not
// translate, or no frontend of the family has a backend).
type svcPlan struct {
	noep [2]*ipSet
	nat  [2]map[string][]string
}

// services renders want.Services: frontends are checked, translated
// (when r.translate) and the ones without backends collected. names are
// the endpoints, sorted. Renders of unchanged entries are reused from the
// last call.
func (r *renderer) services(want *policy.Desired, names []string) (svcPlan, error) {
	var sp svcPlan
	if len(want.Services) == 0 {
		r.svcs = nil
		return sp, nil
	}
	enabled := [2]bool{}
	for _, f := range r.fams {
		enabled[f.index()] = true
	}
	next := make(map[policy.ServiceFrontend]*svcRender, len(want.Services))
	byChain := map[string]policy.ServiceFrontend{}
	var translated [2][]*svcRender
	var backendAddrs [2]map[netip.Addr]bool
	for fr, e := range want.Services {
		if err := checkService(fr, e); err != nil {
			return sp, err
		}
		f := familyOf(fr.Addr.Unmap())
		if !enabled[f.index()] {
			continue
		}
		if sp.noep[f.index()] == nil {
			sp.noep[f.index()] = newFrontendSet(f)
		}
		if len(e.Backends) == 0 && !e.NoLocalBackend {
			sp.noep[f.index()].frontends[unmapFrontend(fr)] = struct{}{}
		}
		sr := r.svcs[fr]
		if sr == nil || sr.entry != e && !sameEntry(sr.entry, e) {
			sr = &svcRender{entry: e, chain: svcChainName(fr)}
			if r.translate && len(e.Backends) > 0 {
				sr.jump = svcJump(fr, e.Service, sr.chain)
				sr.rules = renderDNAT(fr, e.AffinityTimeout, e.Backends)
			}
		} else if sr.entry != e {
			c := *sr
			c.entry = e
			sr = &c
		}
		if other, ok := byChain[sr.chain]; ok {
			return sp, fmt.Errorf("render services: frontends %s and %s hash to the same chain %s", frontendText(other), frontendText(fr), sr.chain)
		}
		byChain[sr.chain] = fr
		next[fr] = sr
		if sr.jump != "" {
			translated[f.index()] = append(translated[f.index()], sr)
			if backendAddrs[f.index()] == nil {
				backendAddrs[f.index()] = map[netip.Addr]bool{}
			}
			for _, b := range e.Backends {
				backendAddrs[f.index()][b.Addr.Unmap()] = true
			}
		}
	}
	r.svcs = next
	for _, f := range r.fams {
		if len(translated[f.index()]) > 0 {
			sp.nat[f.index()] = natChains(f, want, names, translated[f.index()], backendAddrs[f.index()])
		}
	}
	return sp, nil
}

// natChains is the nat table of family f: the dispatch from each
// endpoint's address of the family, one jump per translated frontend,
// each frontend's chain, and the hairpin masquerade of every endpoint
// address that is a backend.
func natChains(f Family, want *policy.Desired, names []string, translated []*svcRender, backends map[netip.Addr]bool) map[string][]string {
	chains := make(map[string][]string, len(translated)+3)
	pods := make([]string, 0, len(names))
	var hairpin []string
	bits := 32
	if f == IPv6 {
		bits = 128
	}
	for _, name := range names {
		ep := want.Endpoints[name]
		a := ep.IPv4
		if f == IPv6 {
			a = ep.IPv6
		}
		if !a.IsValid() {
			continue
		}
		host := netip.PrefixFrom(a.Unmap(), bits).String()
		// Only the pod's own address: a spoofed packet must not reach
		// the nat table's choices (an affinity list would record its
		// source), and the filter table drops it untranslated.
		pods = append(pods, "-s "+host+" -i "+name+" -j "+chainSvcAll)
		if backends[a.Unmap()] {
			hairpin = append(hairpin, "-s "+host+" -d "+host+" -m conntrack --ctstate DNAT -j MASQUERADE")
		}
	}
	slices.Sort(hairpin)
	hairpin = slices.Compact(hairpin)
	slices.SortFunc(translated, func(a, b *svcRender) int { return strings.Compare(a.jump, b.jump) })
	all := make([]string, 0, len(translated))
	for _, sr := range translated {
		all = append(all, sr.jump)
		chains[sr.chain] = sr.rules
	}
	chains[chainSvcPods], chains[chainSvcAll], chains[chainHairpin] = pods, all, hairpin
	return chains
}

// checkService refuses a frontend or backend no rule can express.
func checkService(fr policy.ServiceFrontend, e *policy.ServiceEntry) error {
	if e == nil {
		return fmt.Errorf("render services: frontend %s has no entry", frontendText(fr))
	}
	if _, ok := protoName[fr.Proto]; !ok {
		return fmt.Errorf("render service %s: frontend %s port %d has protocol %d (want 6, 17 or 132)", e.Service, fr.Addr, fr.Port, fr.Proto)
	}
	if !fr.Addr.IsValid() || fr.Port == 0 {
		return fmt.Errorf("render service %s: frontend %s needs an address and a port", e.Service, frontendText(fr))
	}
	for _, b := range e.Backends {
		if !b.Addr.IsValid() || b.Addr.Unmap().Is4() != fr.Addr.Unmap().Is4() || b.Port == 0 {
			return fmt.Errorf("render service %s: frontend %s has backend %s (want an address of its family and a port)", e.Service, frontendText(fr), backendText(b))
		}
	}
	return nil
}

// unmapFrontend is fr with an IPv4 address as 4 bytes, as Desired
// promises and the sets hold it.
func unmapFrontend(fr policy.ServiceFrontend) policy.ServiceFrontend {
	fr.Addr = fr.Addr.Unmap()
	return fr
}

// sameEntry reports whether a and b translate the same way.
func sameEntry(a, b *policy.ServiceEntry) bool {
	return a.Service == b.Service && a.AffinityTimeout == b.AffinityTimeout && a.NoLocalBackend == b.NoLocalBackend &&
		slices.EqualFunc(a.Backends, b.Backends, func(x, y policy.ServiceBackend) bool { return compareBackendAddr(x, y) == 0 })
}

// svcJump is a frontend's rule in LOCKSTEP-SVC-ALL, with the Service's
// name as a comment when it is one iptables prints unquoted inside quotes.
func svcJump(fr policy.ServiceFrontend, service, chain string) string {
	a := fr.Addr.Unmap()
	proto := protoName[fr.Proto]
	rule := "-d " + netip.PrefixFrom(a, a.BitLen()).String() + " -p " + proto + " "
	if plainComment(service) {
		rule += "-m comment --comment \"" + service + "\" "
	}
	return rule + "-m " + proto + " --dport " + strconv.Itoa(int(fr.Port)) + " -j " + chain
}

// plainComment reports whether s can be a rule comment that iptables-save
// prints back unchanged: a Kubernetes namespace/name is.
func plainComment(s string) bool {
	if s == "" || len(s) > 200 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '/' || c == '_') {
			return false
		}
	}
	return true
}

// affinityMask is the --mask of a recent match: the whole address, as
// iptables-save prints it.
func affinityMask(f Family) string {
	if f == IPv6 {
		return "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"
	}
	return "255.255.255.255"
}

// renderDNAT is the chain of frontend fr: like kube-proxy's, the i-th of n
// backends is chosen with probability 1/(n-i) by the statistic match, so
// each gets 1/n. With affinity, a client in a backend's recent list (one
// connection there within the timeout) goes to it first, and every choice
// adds the client to the list of the backend it chose.
func renderDNAT(fr policy.ServiceFrontend, affinity time.Duration, backends []policy.ServiceBackend) []string {
	proto := "-p " + protoName[fr.Proto] + " "
	mask := affinityMask(familyOf(fr.Addr.Unmap()))
	var out []string
	if affinity > 0 {
		secs := strconv.FormatInt(min(max(int64((affinity+time.Second-1)/time.Second), 1), math.MaxInt32), 10)
		for _, b := range backends {
			out = append(out, proto+"-m recent --update --seconds "+secs+" --reap --name "+affinityList(fr, b)+" --mask "+mask+" --rsource -j DNAT --to-destination "+backendText(b))
		}
	}
	for i, b := range backends {
		rule := proto
		if left := len(backends) - i; left > 1 {
			rule += "-m statistic --mode random --probability " + probability(left) + " "
		}
		if affinity > 0 {
			rule += "-m recent --set --name " + affinityList(fr, b) + " --mask " + mask + " --rsource "
		}
		out = append(out, rule+"-j DNAT --to-destination "+backendText(b))
	}
	return out
}

// probability is 1/n as the statistic match stores it (a fraction of
// 2^31, rounded) and iptables-save prints it: "0.33333333349" for 3.
func probability(n int) string {
	v := math.Round(float64(0x80000000) / float64(n))
	return strconv.FormatFloat(v/0x80000000, 'f', 11, 64)
}

// rejectRules refuse a connection to a frontend without backends as the
// eBPF dataplane does: a TCP reset, or an ICMP port unreachable for UDP
// and SCTP. (kube-proxy answers TCP with the ICMP error too; a TCP
// client's connect fails with ECONNREFUSED either way.)
func rejectRules(f Family) []string {
	icmp := "icmp-port-unreachable"
	if f == IPv6 {
		icmp = "icmp6-port-unreachable"
	}
	return []string{"-p tcp -j REJECT --reject-with tcp-reset", "-j REJECT --reject-with " + icmp}
}
