package iptables

import (
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// natOutcome is one way the nat table can send a packet, and its
// probability: translated to to (not valid: left alone), or masqueraded,
// with the recent lists the path adds the client to.
type natOutcome struct {
	prob  float64
	to    netip.AddrPort
	masq  bool
	lists []string
}

// natRule is what the nat evaluator needs of a rule beyond matchRule:
// the probability of its statistic match (1 without), the recent list it
// checks (--update or --rcheck) or adds to (--set), and the DNAT target.
type natRule struct {
	prob          float64
	check, set    string
	to            netip.AddrPort
	hasStatistic  bool
	hasRecentTest bool
}

func parseNATRule(r string) (natRule, error) {
	out := natRule{prob: 1}
	tok := tokens(r)
	test := false
	for i := 0; i < len(tok); i++ {
		switch tok[i] {
		case "--probability":
			v, err := strconv.ParseFloat(tok[i+1], 64)
			if err != nil {
				return out, err
			}
			// The kernel compares 31 random bits with the stored value.
			out.prob, out.hasStatistic = math.Round(v*0x80000000)/0x80000000, true
		case "--update", "--rcheck":
			test = true
		case "--set":
			test = false
		case "--name":
			if test {
				out.check, out.hasRecentTest = tok[i+1], true
			} else {
				out.set = tok[i+1]
			}
		case "--to-destination":
			ap, err := netip.ParseAddrPort(tok[i+1])
			if err != nil {
				return out, err
			}
			out.to = ap
		}
	}
	return out, nil
}

// natOutcomes walks p through the nat chain hook (PREROUTING or
// POSTROUTING) of mode m, branching on every statistic match, and returns
// where the packet may go. A recent test matches when the fake's recent
// lists hold p's source (timeouts are not modelled).
func (n *fakeNode) natOutcomes(m Mode, hook string, p testPacket) ([]natOutcome, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.natOutcomesLocked(m, hook, p)
}

func (n *fakeNode) natOutcomesLocked(m Mode, hook string, p testPacket) ([]natOutcome, error) {
	t := n.tables[tableKey{m, familyOf(p.src), "nat"}]
	var out []natOutcome
	rest := 1.0
	if t != nil {
		var err error
		if rest, err = n.walkNAT(t, hook, p, 1, nil, 0, &out); err != nil {
			return nil, err
		}
	}
	if rest > 1e-12 {
		out = append(out, natOutcome{prob: rest})
	}
	return out, nil
}

// walkNAT sends weight w of p through chain, appending what ends in a
// target to out, and returns the weight that comes back.
func (n *fakeNode) walkNAT(t *fakeTable, chain string, p testPacket, w float64, lists []string, depth int, out *[]natOutcome) (float64, error) {
	if depth > 8 {
		return 0, fmt.Errorf("jump depth exceeded at %s", chain)
	}
	for _, r := range t.chains[chain] {
		if w < 1e-12 {
			return 0, nil
		}
		ok, target, err := n.matchRule(r, p)
		if err != nil {
			return 0, fmt.Errorf("nat chain %s rule %q: %w", chain, r, err)
		}
		nr, err := parseNATRule(r)
		if err != nil {
			return 0, fmt.Errorf("nat chain %s rule %q: %w", chain, r, err)
		}
		if nr.hasRecentTest && !n.recent[nr.check][p.src] {
			ok = false
		}
		if !ok {
			continue
		}
		taken := w * nr.prob
		w -= taken
		path := lists
		if nr.set != "" {
			path = append(slices.Clip(lists), nr.set)
		}
		if nr.hasRecentTest {
			path = append(slices.Clip(path), nr.check)
		}
		switch target {
		case "DNAT":
			*out = append(*out, natOutcome{prob: taken, to: nr.to, lists: path})
		case "MASQUERADE":
			*out = append(*out, natOutcome{prob: taken, masq: true, lists: path})
		case "ACCEPT":
			*out = append(*out, natOutcome{prob: taken, lists: path})
		case "RETURN":
			return w + taken, nil
		default:
			back, err := n.walkNAT(t, target, p, taken, path, depth+1, out)
			if err != nil {
				return 0, err
			}
			w += back
		}
	}
	return w, nil
}

// pathVerdict is what happens to a new connection's first packet on one
// of the paths it may take: where it goes (to, not valid when left
// alone), the filter's verdict (ACCEPT, DROP, REJECT and its answer), and
// whether it leaves masqueraded; lists are the xt_recent lists the path
// adds the client to (the kernel adds it in nat PREROUTING, whatever the
// filter decides next).
type pathVerdict struct {
	prob    float64
	to      netip.AddrPort
	verdict string
	masq    bool
	lists   []string
}

func (v pathVerdict) String() string {
	return fmt.Sprintf("%.4f %v %s masq=%v", v.prob, v.to, v.verdict, v.masq)
}

// routeTo is the node's routing in the semantics tests: a local
// endpoint's address leaves by its interface, anything else by eth0.
func routeTo(d *policy.Desired) func(netip.Addr) string {
	return func(a netip.Addr) string {
		for _, name := range sortedKeys(d.Endpoints) {
			if ep := d.Endpoints[name]; ep.IPv4 == a || ep.IPv6 == a {
				return name
			}
		}
		return "eth0"
	}
}

// evalPaths runs p, a connection's first packet arriving on p.in, through
// the fake as the kernel does: nat PREROUTING, routing (route), filter
// FORWARD, nat POSTROUTING. A packet at another hook meets only the filter
// table. The tables are read at one instant: the packet's way through the
// hooks does not span a commit (see doc.go, "Services").
func (n *fakeNode) evalPaths(m Mode, p testPacket, route func(netip.Addr) string) ([]pathVerdict, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if p.hook != "FORWARD" {
		v, err := n.filterVerdict(m, p)
		return []pathVerdict{{prob: 1, verdict: v}}, err
	}
	pre, err := n.natOutcomesLocked(m, "PREROUTING", p)
	if err != nil {
		return nil, err
	}
	var out []pathVerdict
	for _, o := range pre {
		q := p
		if o.to.IsValid() {
			q.dst, q.dport, q.dnat = o.to.Addr(), o.to.Port(), true
			q.out = route(q.dst)
		}
		v, err := n.filterVerdict(m, q)
		if err != nil {
			return nil, err
		}
		pv := pathVerdict{prob: o.prob, to: o.to, verdict: v, lists: o.lists}
		if v == "ACCEPT" {
			post, err := n.natOutcomesLocked(m, "POSTROUTING", q)
			if err != nil {
				return nil, err
			}
			for _, po := range post {
				if po.masq && po.prob < 1-1e-9 {
					return nil, fmt.Errorf("masqueraded with probability %v", po.prob)
				}
				pv.masq = pv.masq || po.masq
			}
		}
		out = append(out, pv)
	}
	return out, nil
}

// samePaths reports whether two path lists accept a packet to the same
// destinations with the same probabilities (within rounding) and
// masquerade, and drop and refuse it with the same probabilities (where
// a dropped or refused packet was headed does not matter).
func samePaths(a, b []pathVerdict) bool {
	merge := func(ps []pathVerdict) map[string]float64 {
		m := map[string]float64{}
		for _, p := range ps {
			key := p.verdict
			if p.verdict == "ACCEPT" {
				key = fmt.Sprintf("ACCEPT %v masq=%v", p.to, p.masq)
			}
			m[key] += p.prob
		}
		return m
	}
	ma, mb := merge(a), merge(b)
	if len(ma) != len(mb) {
		return false
	}
	for k, pa := range ma {
		if pb, ok := mb[k]; !ok || math.Abs(pa-pb) > 1e-6 {
			return false
		}
	}
	return true
}

// dataplane names one of the two dataplanes, where refPaths must say
// which one it models.
type dataplane string

const (
	ebpfDataplane     dataplane = "eBPF"
	iptablesDataplane dataplane = "iptables"
)

// byDesign names the case when the two dataplanes treat p, a packet in
// state d, differently on purpose, and returns "" for every other packet:
// the comparisons of the dataplanes (TestSemanticsMatchEBPF against the
// model, TestPrivilegedDataplanesAgree against the real programs) hold
// them to the same answer except in these cases, which README ("Other
// dataplanes") documents.
//
//   - "sctp-port": a pod's new SCTP connection to a frontend with a
//     backend on another port. SCTP's CRC32c covers the ports and no BPF
//     helper can update it, so the eBPF programs leave such a frontend to
//     kube-proxy and judge the packet on the ClusterIP; the iptables
//     dataplane translates it as kube-proxy does (netfilter recomputes the
//     CRC).
//
// One more difference changes no verdict and is checked where it shows:
// a pod reaching itself through a Service gets the connection from the
// frontend's address under eBPF, from the node's (masqueraded) under
// iptables.
func byDesign(d *policy.Desired, p testPacket) string {
	ep := d.Endpoints[p.in]
	if p.proto != policyapi.ProtoSCTP || ep == nil || p.hook != "FORWARD" || p.established || !sourceOK(ep, p) || !linkOK(p) {
		return ""
	}
	e := d.Services[policy.ServiceFrontend{Addr: p.dst, Port: p.dport, Proto: p.proto}]
	if e == nil {
		return ""
	}
	for _, b := range e.Backends {
		if b.Port != p.dport {
			return "sctp-port"
		}
	}
	return ""
}

// refPaths is what dataplane dp does with p per the Service translation's
// spec: from_pod of an endpoint (or the nat table), after anti-spoofing,
// translates a frontend to one of its backends chosen uniformly (then
// judges the translated packet, to_pod of the backend's endpoint too)
// and refuses a frontend without backends (TCP with a reset, UDP and SCTP
// with an ICMP port unreachable); a pod reaching itself is masqueraded.
// Where the dataplanes differ by design (byDesign), each gets its own
// answer. Every other packet is refAllowed's.
func refPaths(d *policy.Desired, p testPacket, route func(netip.Addr) string, dp dataplane) []pathVerdict {
	verdict := func(q testPacket) string {
		if refAllowed(d, q) {
			return "ACCEPT"
		}
		return "DROP"
	}
	e := d.Services[policy.ServiceFrontend{Addr: p.dst, Port: p.dport, Proto: p.proto}]
	ep := d.Endpoints[p.in]
	if e == nil || ep == nil || p.hook != "FORWARD" || p.established || dp == ebpfDataplane && byDesign(d, p) == "sctp-port" {
		return []pathVerdict{{prob: 1, verdict: verdict(p)}}
	}
	if !sourceOK(ep, p) || !linkOK(p) {
		return []pathVerdict{{prob: 1, verdict: "DROP"}}
	}
	if len(e.Backends) == 0 {
		return []pathVerdict{{prob: 1, verdict: refusal(p)}}
	}
	var out []pathVerdict
	for _, b := range e.Backends {
		q := p
		q.dst, q.dport, q.out = b.Addr, b.Port, route(b.Addr)
		out = append(out, pathVerdict{prob: 1 / float64(len(e.Backends)), to: netip.AddrPortFrom(b.Addr, b.Port), verdict: verdict(q), masq: b.Addr == p.src})
	}
	return out
}

// refusal is how both dataplanes refuse p, a connection to a frontend
// without backends: the verdict, with the answer as iptables names it.
func refusal(p testPacket) string {
	switch {
	case p.proto == policyapi.ProtoTCP:
		return "REJECT tcp-reset"
	case p.dst.Is4():
		return "REJECT icmp-port-unreachable"
	}
	return "REJECT icmp6-port-unreachable"
}
