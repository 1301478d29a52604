package policy

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// failWorld generates a node's pods and policies at random, valid
// policies and bad ones: unconvertible (a CIDR netip rejects, port 0, an
// unknown policy type, a selector key that is not a label key), oversized
// (more single ports than a rule key holds) and prefix hogs (more except
// prefixes than a namespace's budget).
type failWorld struct {
	rng  *rand.Rand
	nss  []string
	pods []*policyapi.Pod
}

var failLimits = Limits{PrefixesPerNamespace: 40, RulesPerNamespace: 4 * MaxPortRanges, Prefixes: 200}

func newFailWorld(seed uint64) *failWorld {
	w := &failWorld{rng: rand.New(rand.NewPCG(seed, 16)), nss: []string{"ns0", "ns1", "ns2", "ns3"}}
	for i := range 12 {
		ns := w.nss[w.rng.IntN(len(w.nss))]
		p := mkPod(ns, fmt.Sprintf("p%d", i), ips(fmt.Sprintf("10.%d.0.%d", 1+i%3, 1+i)), "app", w.pick("a", "b", "c"))
		w.pods = append(w.pods, p)
	}
	return w
}

func (w *failWorld) pick(xs ...string) string { return xs[w.rng.IntN(len(xs))] }

func (w *failWorld) selector() *policyapi.LabelSelector {
	if w.rng.IntN(3) == 0 {
		return &policyapi.LabelSelector{}
	}
	return sel("app", w.pick("a", "b", "c"))
}

func (w *failWorld) peers() []policyapi.NetworkPolicyPeer {
	var out []policyapi.NetworkPolicyPeer
	for range w.rng.IntN(3) {
		switch w.rng.IntN(3) {
		case 0:
			out = append(out, policyapi.NetworkPolicyPeer{PodSelector: w.selector()})
		case 1:
			out = append(out, policyapi.NetworkPolicyPeer{NamespaceSelector: sel(policyapi.NamespaceNameLabel, w.pick(w.nss...)), PodSelector: w.selector()})
		default:
			b := &policyapi.IPBlock{CIDR: fmt.Sprintf("10.%d.0.0/16", w.rng.IntN(4))}
			if w.rng.IntN(2) == 0 {
				b.Except = []string{b.CIDR[:len(b.CIDR)-4] + "0/28"}
			}
			out = append(out, policyapi.NetworkPolicyPeer{IPBlock: b})
		}
	}
	return out
}

func (w *failWorld) ports(n int) []policyapi.NetworkPolicyPort {
	var out []policyapi.NetworkPolicyPort
	for range n {
		p := policyapi.NetworkPolicyPort{Port: policyapi.FromInt(int32(1 + w.rng.IntN(64)*2))}
		if w.rng.IntN(4) == 0 {
			udp := policyapi.UDP
			p.Protocol = &udp
		}
		out = append(out, p)
	}
	return out
}

// policy returns a valid policy of ns.
func (w *failWorld) policy(ns, name string) *policyapi.NetworkPolicy {
	spec := policyapi.NetworkPolicySpec{}
	for range w.rng.IntN(3) {
		spec.Ingress = append(spec.Ingress, policyapi.IngressRule{From: w.peers(), Ports: w.ports(w.rng.IntN(3))})
	}
	for range w.rng.IntN(3) {
		spec.Egress = append(spec.Egress, policyapi.EgressRule{To: w.peers(), Ports: w.ports(w.rng.IntN(3))})
	}
	if w.rng.IntN(3) == 0 {
		spec.PolicyTypes = []policyapi.PolicyType{policyapi.PolicyTypeEgress}
	}
	return mkPolicy(ns, name, w.selector(), spec)
}

// bad returns a policy lockstep cannot enforce as written, and whether
// its whole namespace goes over budget with it.
func (w *failWorld) bad(ns, name string) (np *policyapi.NetworkPolicy, overBudget bool) {
	np = w.policy(ns, name)
	switch w.rng.IntN(6) {
	case 0:
		np.Spec.Ingress = append(np.Spec.Ingress, policyapi.IngressRule{From: []policyapi.NetworkPolicyPeer{{IPBlock: &policyapi.IPBlock{CIDR: "10.0.0.0/33"}}}})
	case 1:
		np.Spec.Egress = append(np.Spec.Egress, policyapi.EgressRule{Ports: []policyapi.NetworkPolicyPort{tcp(0)}})
	case 2:
		np.Spec.PolicyTypes = []policyapi.PolicyType{policyapi.PolicyTypeIngress, "Sideways"}
	case 3:
		np.Spec.PodSelector = *sel("not a key!", "x")
	case 4:
		var many []policyapi.NetworkPolicyPort
		for i := range MaxPortRanges + 1 + w.rng.IntN(8) {
			many = append(many, tcp(int32(1+2*i)))
		}
		np.Spec.Ingress = append(np.Spec.Ingress, policyapi.IngressRule{From: []policyapi.NetworkPolicyPeer{{PodSelector: w.selector()}}, Ports: many})
	default:
		b := &policyapi.IPBlock{CIDR: "10.0.0.0/8"}
		for i := range failLimits.PrefixesPerNamespace {
			b.Except = append(b.Except, fmt.Sprintf("10.200.%d.0/24", i))
		}
		np.Spec.Egress = append(np.Spec.Egress, policyapi.EgressRule{To: []policyapi.NetworkPolicyPeer{{IPBlock: b}}})
		return np, true
	}
	return np, false
}

// selects reports whether np, if it failed, would fail pod closed:
// pod is in its namespace and its selector (every pod, when it does not
// parse) picks it.
func selects(np *policyapi.NetworkPolicy, pod *policyapi.Pod) bool {
	if policyapi.PodNamespace(pod) != policyNamespace(np) {
		return false
	}
	s, err := policyapi.ParseSelector(&np.Spec.PodSelector)
	return err != nil || s.Matches(pod.Labels)
}

// TestFailClosedRandom: random policies of random size and shape, some of
// them bad, on one node. Compilation never fails; the incremental
// compiler agrees; an endpoint no bad policy selects (and whose namespace
// is within budget) gets exactly the verdicts it gets without the bad
// policies; one a failed policy selects for a direction fails closed
// there: isolated, allowing nothing.
func TestFailClosedRandom(t *testing.T) {
	seeds := 200
	if testing.Short() {
		seeds = 40
	}
	var unaffected, failedDirs, checked int
	for seed := range seeds {
		w := newFailWorld(uint64(seed))
		var good, all []*policyapi.NetworkPolicy
		var bad []*policyapi.NetworkPolicy
		overNS := map[string]bool{}
		for i := range 3 + w.rng.IntN(6) {
			ns := w.pick(w.nss...)
			if w.rng.IntN(3) == 0 {
				np, over := w.bad(ns, fmt.Sprintf("bad%d", i))
				bad = append(bad, np)
				all = append(all, np)
				overNS[ns] = overNS[ns] || over
				continue
			}
			np := w.policy(ns, fmt.Sprintf("good%d", i))
			good = append(good, np)
			all = append(all, np)
		}
		var local []LocalEndpoint
		for _, p := range w.pods {
			local = append(local, LocalEndpoint{HostIfName: p.Namespace + "-" + p.Name, Namespace: p.Namespace, PodName: p.Name,
				IPv4: netip.MustParseAddr(p.Status.PodIPs[0].IP)})
		}
		compile := func(policies []*policyapi.NetworkPolicy) *Desired {
			s := scenario{pods: w.pods, policies: policies, local: local}.snapshot()
			s.Limits = failLimits
			d, err := Compile(s)
			if err != nil {
				t.Fatalf("seed %d: compile: %v", seed, err)
			}
			if policies == nil {
				return d
			}
			inc := NewIncremental()
			inc.SetLimits(failLimits)
			feedSnapshot(inc, s)
			got, err := inc.Compile()
			if err != nil {
				t.Fatalf("seed %d: incremental compile: %v", seed, err)
			}
			if diff := diffDesired(got, d); diff != "" {
				t.Fatalf("seed %d: incremental differs from Compile:\n%s", seed, diff)
			}
			return d
		}
		base, got := compile(good), compile(all)

		for _, p := range w.pods {
			name := p.Namespace + "-" + p.Name
			ep, was := got.Endpoints[name], base.Endpoints[name]
			affected := overNS[p.Namespace] && slices.ContainsFunc(good, func(np *policyapi.NetworkPolicy) bool { return selects(np, p) })
			affected = affected || slices.ContainsFunc(bad, func(np *policyapi.NetworkPolicy) bool { return selects(np, p) })
			for d := policyapi.Ingress; d <= policyapi.Egress; d++ {
				for _, peer := range w.pods {
					for _, proto := range []uint8{policyapi.ProtoTCP, policyapi.ProtoUDP} {
						for port := uint16(1); port <= 130; port += 3 {
							remote := netip.MustParseAddr(peer.Status.PodIPs[0].IP)
							now, before := verdict(got, ep, d, remote, proto, port), verdict(base, was, d, remote, proto, port)
							checked++
							switch {
							case !affected && now != before:
								t.Fatalf("seed %d: %s, selected by no bad policy: %s %s proto %d port %d: %v, %v without the bad policies\nbad: %v",
									seed, name, d, remote, proto, port, now, before, bad)
							case affected && ep.Failed[d] != "" && now:
								t.Fatalf("seed %d: %s fails closed for %s (%s) but allows %s proto %d port %d", seed, name, d, ep.Failed[d], remote, proto, port)
							}
						}
					}
				}
				// A failed policy that selects the endpoint for d fails d.
				for _, np := range all {
					if why := got.FailedPolicies[policyNamespace(np)+"/"+np.Name]; why != "" && selects(np, p) &&
						compileOrFail(np, "failed").Applies[d] && ep.Failed[d] == "" {
						t.Fatalf("seed %d: %s: policy %s/%s failed (%s) and selects it for %s, which does not fail closed", seed, name, np.Namespace, np.Name, why, d)
					}
				}
				if ep.Failed[d] != "" {
					failedDirs++
					if iso := [2]bool{ep.IngressIsolated, ep.EgressIsolated}[d]; !iso || !affected {
						t.Fatalf("seed %d: %s fails %s (%s): isolated %v, selected by a bad policy %v", seed, name, d, ep.Failed[d], iso, affected)
					}
				}
			}
			if !affected {
				unaffected++
			}
		}
	}
	if unaffected < seeds || failedDirs < seeds {
		t.Fatalf("%d unaffected endpoints, %d failed directions over %d seeds: the random worlds test too little", unaffected, failedDirs, seeds)
	}
	t.Logf("%d verdicts checked; %d endpoints unaffected, %d directions failed closed", checked, unaffected, failedDirs)
}

// verdict is what the dataplane decides for a new connection of ep in
// direction d with remote, as bpf/lib/policy.h does: a direction that is
// not isolated allows everything; otherwise the remote's identity, its
// CIDR class or PeerAny must have a rule whose ranges hold port.
func verdict(dsr *Desired, ep *EndpointPolicy, d policyapi.Direction, remote netip.Addr, proto uint8, port uint16) bool {
	if !([2]bool{ep.IngressIsolated, ep.EgressIsolated}[d]) {
		return true
	}
	identity, class := policyapi.PeerWorld, policyapi.NoCIDRClass
	if e, ok := dsr.Addrs[remote]; ok {
		identity, class = e.Identity, e.CIDRClass
	} else {
		best := -1
		for p, c := range dsr.CIDRs {
			if p.Contains(remote) && p.Bits() > best {
				best, class = p.Bits(), c
			}
		}
	}
	allows := func(peer policyapi.Peer) bool {
		for _, r := range ep.Rules[RuleKey{Peer: peer, Dir: d, Proto: proto}] {
			if port >= r.Lo && port <= r.Hi {
				return true
			}
		}
		return false
	}
	return allows(identity) || class != policyapi.NoCIDRClass && allows(class) || allows(policyapi.PeerAny)
}
