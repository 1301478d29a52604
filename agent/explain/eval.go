package explain

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// index is what one Explain call looks things up in.
type index struct {
	s        *policy.Snapshot
	pods     map[string]*policyapi.Pod // NAMESPACE/NAME, hostNetwork ones included
	owner    map[netip.Addr]*policyapi.Pod
	policies map[string][]*judged // by namespace, sorted by name
}

// judged is a policy ready to judge: defaulted types, and why it fails
// closed ("" when it does not).
type judged struct {
	np      *policyapi.NetworkPolicy
	name    string
	applies [2]bool // Ingress, Egress as policyapi.Direction numbers them
	podSel  *policyapi.LabelSelector
	failed  string
}

func newIndex(s *policy.Snapshot) *index {
	ix := &index{s: s, pods: map[string]*policyapi.Pod{}, owner: map[netip.Addr]*policyapi.Pod{}, policies: map[string][]*judged{}}
	for _, p := range s.Pods {
		key := policyapi.PodNamespace(p) + "/" + p.Name
		if _, dup := ix.pods[key]; dup {
			continue
		}
		ix.pods[key] = p
		if p.Spec.HostNetwork || p.Status.Phase == policyapi.PodSucceeded || p.Status.Phase == policyapi.PodFailed {
			continue
		}
		for _, a := range podAddrs(p) {
			// Two pods claiming an address: the first by namespace/name
			// keeps it, as in the compiler.
			if prev, ok := ix.owner[a]; !ok || key < policyapi.PodNamespace(prev)+"/"+prev.Name {
				ix.owner[a] = p
			}
		}
	}
	for _, np := range s.Policies {
		j := judge(np)
		ns := policyapi.NamespaceOrDefault(np.Namespace)
		ix.policies[ns] = append(ix.policies[ns], j)
	}
	for _, js := range ix.policies {
		slices.SortFunc(js, func(a, b *judged) int { return strings.Compare(a.name, b.name) })
	}
	return ix
}

// judge defaults np's policy types and decides whether it fails closed,
// as the compiler does: an invalid policy still selects the pods its
// selector picks (every pod when the selector is invalid too) for the
// directions its types name (both when one is unknown).
func judge(np *policyapi.NetworkPolicy) *judged {
	j := &judged{np: np, name: policyapi.NamespaceOrDefault(np.Namespace) + "/" + np.Name, podSel: &np.Spec.PodSelector}
	if err := np.Validate(); err != nil {
		j.failed = err.Error()
		if _, err := np.Spec.PodSelector.Matches(nil); err != nil {
			j.podSel = &policyapi.LabelSelector{}
		}
	}
	for _, t := range policyapi.PolicyTypes(&np.Spec) {
		switch t {
		case policyapi.PolicyTypeIngress:
			j.applies[policyapi.Ingress] = true
		case policyapi.PolicyTypeEgress:
			j.applies[policyapi.Egress] = true
		default:
			j.applies = [2]bool{true, true}
			return j
		}
	}
	return j
}

// resolve finds e in the snapshot. An address a pod owns is that pod.
func (ix *index) resolve(e Endpoint) (*party, error) {
	if !e.IsPod() {
		if !e.Prefix.IsValid() {
			return nil, fmt.Errorf("%w: an empty endpoint", ErrBadQuery)
		}
		if e.Prefix.IsSingleIP() {
			if p := ix.owner[e.Prefix.Addr()]; p != nil {
				return ix.podParty(p), nil
			}
		}
		return &party{prefix: e.Prefix}, nil
	}
	p := ix.pods[e.Namespace+"/"+e.Name]
	if p == nil {
		return nil, fmt.Errorf("%w %s/%s (the pods of namespace %s are %s)", ErrUnknownPod, e.Namespace, e.Name, e.Namespace, ix.podsOf(e.Namespace))
	}
	if p.Spec.HostNetwork {
		return nil, fmt.Errorf("%w: pod %s/%s uses the host's network: NetworkPolicy does not apply to it; give its node's address instead", ErrBadQuery, e.Namespace, e.Name)
	}
	return ix.podParty(p), nil
}

func (ix *index) podParty(p *policyapi.Pod) *party {
	ns := policyapi.PodNamespace(p)
	pt := &party{pod: p, ns: ns, nsLabels: policyapi.NamespaceLabels(ns, ix.s.Namespaces[ns])}
	if p.Status.Phase != policyapi.PodSucceeded && p.Status.Phase != policyapi.PodFailed {
		pt.addrs = podAddrs(p)
	}
	return pt
}

// podsOf lists the names of ns's pods for an error message.
func (ix *index) podsOf(ns string) string {
	var names []string
	for key := range ix.pods {
		if n, name, _ := strings.Cut(key, "/"); n == ns {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return "none"
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// serviceAt returns the Service one of whose ClusterIPs is a, or nil.
func (ix *index) serviceAt(a netip.Addr) *policyapi.Service {
	for _, svc := range ix.s.Services {
		ips := append([]string{svc.Spec.ClusterIP}, svc.Spec.ClusterIPs...)
		for _, text := range ips {
			if b, err := netip.ParseAddr(text); err == nil && b.Unmap() == a {
				return svc
			}
		}
	}
	return nil
}

// clientNode is the node whose translation from's connections get, as the
// compiler translates for it: this node (the snapshot's), or in Kubernetes
// mode a pod's own. The agent knows only its own node's zone and
// addresses: a pod of another node is taken to be in no zone, where zone
// hints narrow nothing, and its node to have no NodePorts.
func (ix *index) clientNode(from *party) policyapi.Node {
	here := policyapi.Node{Name: ix.s.Node, Zone: ix.s.Zone, Addrs: ix.s.NodeAddrs}
	if here.Name != "" && from.isPod() && from.pod.Spec.NodeName != "" && from.pod.Spec.NodeName != here.Name {
		return policyapi.Node{Name: from.pod.Spec.NodeName}
	}
	return here
}

// externalFrontend returns the entry of the external frontend a, port,
// proto is for from's connections (see policy.ServiceEntry.External), or
// nil.
func (ix *index) externalFrontend(from *party, a netip.Addr, port uint16, proto policyapi.Protocol) (*policy.ServiceEntry, error) {
	num, err := proto.Number()
	if err != nil {
		return nil, nil // the caller's answer says so
	}
	table, _, err := policy.ServiceTable(ix.s.Services, ix.s.EndpointSlices, ix.clientNode(from), ix.s.Limits)
	if err != nil {
		return nil, err
	}
	if e := table[policy.ServiceFrontend{Addr: a, Port: port, Proto: num}]; e != nil && e.External {
		return e, nil
	}
	return nil, nil
}

// externalFrontendError is explain's answer for a connection to an
// external frontend e: not modelled.
func externalFrontendError(q Query, e *policy.ServiceEntry, proto policyapi.Protocol) error {
	return fmt.Errorf("explain --to %s: %w: on %d/%s it is an externalIP, load-balancer IP or NodePort of service %s, which the dataplanes translate and kube-proxy masquerades, so a backend on another node judges the connection from the node's address; explain does not model that: name a backend pod to judge egress",
		q.To, ErrServiceAddress, q.Port, proto, e.Service)
}

// side judges c in direction dir: the source's egress or the
// destination's ingress.
func (ix *index) side(c conn, dir string) Side {
	self, peer, d := c.from, c.to, policyapi.Egress
	if dir == Ingress {
		self, peer, d = c.to, c.from, policyapi.Ingress
	}
	sd := Side{Direction: dir, Endpoint: self.name(), Policies: []string{}, AllowedBy: []string{}, Verdict: Allow}
	if !self.isPod() {
		sd.External = true
		sd.Reason = self.name() + " is outside the cluster: no policy of its own"
		return sd
	}
	var selecting []*judged
	for _, j := range ix.policies[self.ns] {
		if !j.applies[d] {
			continue
		}
		if ok, _ := j.podSel.Matches(self.pod.Labels); ok {
			selecting = append(selecting, j)
			sd.Policies = append(sd.Policies, j.name)
			if j.failed != "" {
				sd.FailedPolicies = append(sd.FailedPolicies, Failed{Policy: j.name, Reason: j.failed})
			}
		}
	}
	if len(selecting) == 0 {
		sd.Reason = "not isolated for " + dir + " (no policy selects " + self.name() + " for " + dir + ")"
		return sd
	}
	sd.Isolated = true
	if len(sd.FailedPolicies) > 0 {
		sd.Verdict = Deny
		f := sd.FailedPolicies[0]
		sd.Reason = "failed closed: " + f.Policy + " is invalid and selects " + self.name() + " for " + dir + ": " + f.Reason
		return sd
	}
	for _, j := range selecting {
		rules := j.np.Spec.Ingress
		if d == policyapi.Egress {
			rules = nil
			for _, r := range j.np.Spec.Egress {
				rules = append(rules, policyapi.IngressRule{Ports: r.Ports, From: r.To})
			}
		}
		for i, r := range rules {
			if peersMatch(j, r.From, peer) && portsMatch(r.Ports, c) {
				sd.AllowedBy = append(sd.AllowedBy, fmt.Sprintf("%s %s[%d]", j.name, dir, i))
			}
		}
	}
	if len(sd.AllowedBy) > 0 {
		sd.Reason = "allowed by " + sd.AllowedBy[0]
		if n := len(sd.AllowedBy) - 1; n > 0 {
			sd.Reason += fmt.Sprintf(" (and %d more)", n)
		}
		return sd
	}
	sd.Verdict = Deny
	what := "from " + peer.name()
	if d == policyapi.Egress {
		what = "to " + peer.name()
	}
	sd.Reason = fmt.Sprintf("default deny: %s is isolated for %s by %s and no rule allows %s on %d/%s",
		self.name(), dir, strings.Join(sd.Policies, ", "), what, c.port, c.proto)
	return sd
}

// peersMatch reports whether any of peers (of policy j) is peer; no peers
// is everyone.
func peersMatch(j *judged, peers []policyapi.NetworkPolicyPeer, peer *party) bool {
	if len(peers) == 0 {
		return true
	}
	for _, p := range peers {
		if p.IPBlock != nil {
			if blockHolds(p.IPBlock, peer.prefix) {
				return true
			}
			continue
		}
		if !peer.isPod() {
			continue
		}
		if p.NamespaceSelector == nil {
			if peer.ns != policyapi.NamespaceOrDefault(j.np.Namespace) {
				continue
			}
		} else if ok, _ := p.NamespaceSelector.Matches(peer.nsLabels); !ok {
			continue
		}
		if p.PodSelector != nil {
			if ok, _ := p.PodSelector.Matches(peer.pod.Labels); !ok {
				continue
			}
		}
		return true
	}
	return false
}

// blockHolds reports whether every address of p lies in b's cidr and in
// none of its excepts.
func blockHolds(b *policyapi.IPBlock, p netip.Prefix) bool {
	if !p.IsValid() {
		return false
	}
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil || cidr.Addr().Is4() != p.Addr().Is4() || cidr.Bits() > p.Bits() || !cidr.Contains(p.Addr()) {
		return false
	}
	for _, text := range b.Except {
		ex, err := netip.ParsePrefix(text)
		if err == nil && ex.Overlaps(p) {
			return false
		}
	}
	return true
}

// portsMatch reports whether any of ports allows c; no ports allow
// everything. A named port resolves on the destination pod's containers.
func portsMatch(ports []policyapi.NetworkPolicyPort, c conn) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		proto := policyapi.TCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		if proto != c.proto {
			continue
		}
		switch {
		case p.Port == nil:
			return true
		case p.Port.IsString:
			if c.to.isPod() && declares(c.to.pod, p.Port.StrVal, c.proto, c.port) {
				return true
			}
		default:
			lo, hi := p.Port.IntVal, p.Port.IntVal
			if p.EndPort != nil {
				hi = *p.EndPort
			}
			if int32(c.port) >= lo && int32(c.port) <= hi {
				return true
			}
		}
	}
	return false
}

// declares reports whether pod has a container port named name of proto
// numbered port.
func declares(pod *policyapi.Pod, name string, proto policyapi.Protocol, port uint16) bool {
	for _, ctr := range pod.Spec.Containers {
		for _, cp := range ctr.Ports {
			if cp.Name == name && cmp.Or(cp.Protocol, policyapi.TCP) == proto && cp.ContainerPort == int32(port) {
				return true
			}
		}
	}
	return false
}

// podAddrs returns the pod's addresses (policyapi.PodAddrs). A pod whose
// addresses do not parse, which validation refuses before it reaches a
// snapshot, has none.
func podAddrs(p *policyapi.Pod) []netip.Addr {
	addrs, _ := policyapi.PodAddrs(p)
	return addrs
}
