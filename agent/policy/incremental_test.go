package policy

import (
	"fmt"
	"slices"
	"testing"
	"unsafe"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// TestIncrementalMatchesCompile is the differential test of the
// incremental compiler: random namespaces, pods, policies, identity
// numbers and local endpoints change a few at a time, and after every step
// the incremental result must equal a full Compile of the same objects
// (both failing, or equal entry for entry). It also checks that no result
// handed out earlier was modified, which the sharing of unchanged parts
// between results must never do.
func TestIncrementalMatchesCompile(t *testing.T) {
	seeds, steps := 12, 1500
	if testing.Short() {
		seeds, steps = 3, 500
	}
	var compiled, failed, rules, reused, ruleHits, ruleMisses int
	var frontends, backends, svcReused, overCapacity int
	var keptRanges, movedOrigins int
	var deltas int
	for seed := range seeds {
		w := newWorld(uint64(seed) + 1)
		var prev, prevCopy *Desired
		for step := range steps {
			for range 1 + w.rng.IntN(3) {
				w.edit()
			}
			if w.chance(0.05) {
				for range 10 + w.rng.IntN(20) { // a burst, one compilation
					w.edit()
				}
			}
			want, wantErr := Compile(w.snapshot())
			got, gotErr := w.inc.Compile()
			if st := w.inc.st; st != nil {
				ruleHits, ruleMisses = ruleHits+st.ruleHits, ruleMisses+st.ruleMisses
				st.ruleHits, st.ruleMisses = 0, 0
			}
			w.failed = wantErr != nil
			if (gotErr != nil) != (wantErr != nil) {
				t.Fatalf("seed %d step %d: incremental error %v, full error %v", seed, step, gotErr, wantErr)
			}
			if prev != nil {
				if diff := diffDesired(prev, prevCopy); diff != "" {
					t.Fatalf("seed %d step %d: a result handed out earlier was modified:\n%s", seed, step, diff)
				}
			}
			if wantErr != nil {
				failed++
				continue
			}
			compiled++
			if diff := diffDesired(got, want); diff != "" {
				t.Fatalf("seed %d step %d: incremental result differs from Compile:\n%s", seed, step, diff)
			}
			for name, ep := range got.Endpoints {
				rules += len(ep.Rules)
				if prev != nil && prev.Endpoints[name] == ep {
					reused++
				}
				if prev == nil || prev.Endpoints[name] == nil {
					continue
				}
				pe := prev.Endpoints[name]
				for k, rs := range ep.Rules {
					prs, ok := pe.Rules[k]
					same := ok && len(prs) == len(rs) && unsafe.SliceData(prs) == unsafe.SliceData(rs)
					moved := !SameOrigin(pe.Origins[k], ep.Origins[k])
					switch {
					case same && moved:
						t.Fatalf("seed %d step %d: endpoint %s key %+v keeps its ranges slice, but its origin went from %v to %v", seed, step, name, k, pe.Origins[k], ep.Origins[k])
					case same:
						keptRanges++
					case ok && moved && slices.Equal(prs, rs):
						movedOrigins++
					}
				}
			}
			if len(got.ServicesOverCapacity) > 0 {
				overCapacity++
			}
			for fe, e := range got.Services {
				frontends++
				backends += len(e.Backends)
				if prev == nil {
					continue
				}
				switch old := prev.Services[fe]; {
				case old == e:
					svcReused++
				case old != nil && sameEntry(old, e):
					t.Fatalf("seed %d step %d: frontend %+v's entry is equal to the last one but a new object", seed, step, fe)
				}
			}
			if got.ServicesBase != nil {
				// The base is always the last result's Services: a
				// failed compilation rebuilds, and a rebuild has none.
				if prev == nil || !sameMap(got.ServicesBase, prev.Services) {
					t.Fatalf("seed %d step %d: Services came as a change of a map that is not the last result's", seed, step)
				}
				deltas++
				if msg := checkServicesDelta(got); msg != "" {
					t.Fatalf("seed %d step %d: %s", seed, step, msg)
				}
			}
			prev, prevCopy = got, deepCopy(got)
		}
	}
	t.Logf("%d results came as a change of the last one's Services", deltas)
	if deltas < compiled/20 {
		t.Errorf("only %d of %d results came as a change of the last one's Services (Desired.ServicesBase)", deltas, compiled)
	}
	t.Logf("%d compilations, %d failed as the full compiler did, %d rules compared, %d endpoint policies reused; full recomputes took %d rules from their caches and resolved %d",
		compiled, failed, rules, reused, ruleHits, ruleMisses)
	t.Logf("%d service frontends compared, %d backends, %d entries reused, %d results with namespaces over the Service limits", frontends, backends, svcReused, overCapacity)
	if overCapacity == 0 || overCapacity == compiled {
		t.Errorf("the random world never or always goes over its Service limits: %d of %d results", overCapacity, compiled)
	}
	t.Logf("%d keys kept their ranges slice, %d whose origin alone changed got new ranges", keptRanges, movedOrigins)
	// The world must exercise both outcomes, real rules and the rule
	// caches, or the comparison proves little.
	if compiled < seeds*steps/3 || failed == 0 || rules < compiled || reused == 0 || ruleHits < ruleMisses/10 {
		t.Errorf("the random world is too tame: %d compiled, %d failed, %d rules, %d reused, %d cached rules, %d resolved", compiled, failed, rules, reused, ruleHits, ruleMisses)
	}
	// A dataplane takes a key's kept ranges slice for a kept origin
	// (see Desired): both must happen for the check above to prove it.
	if keptRanges == 0 || movedOrigins == 0 {
		t.Errorf("the random world's origins are too tame: %d kept ranges, %d origins changed alone", keptRanges, movedOrigins)
	}
	if frontends < compiled || backends < compiled || svcReused < frontends/2 {
		t.Errorf("the random world's Services are too tame: %d frontends, %d backends, %d reused", frontends, backends, svcReused)
	}
}

// TestIncrementalSharesUnchanged: a result shares the maps and endpoint
// policies a change did not touch, which backends rely on to skip work.
func TestIncrementalSharesUnchanged(t *testing.T) {
	inc := NewIncremental()
	nsTeam := mkNS("team", "env", "prod")
	inc.SetNamespace(nsTeam)
	pods := []*policyapi.Pod{
		mkPod("team", "a", ips("10.0.0.1"), "app", "a"),
		mkPod("team", "b", ips("10.0.0.2"), "app", "b"),
		mkPod("team", "c", ips("10.0.0.3"), "app", "c"),
	}
	for _, p := range pods {
		inc.SetPod(p)
		inc.SetIdentity(policyapi.IdentityKey(nsTeam, p), policyapi.FirstPodIdentity+policyapi.Peer(len(inc.in.identities)))
	}
	inc.SetLocal([]LocalEndpoint{
		{HostIfName: "lxc-a", Namespace: "team", PodName: "a", IPv4: addr("10.0.0.1")},
		{HostIfName: "lxc-b", Namespace: "team", PodName: "b", IPv4: addr("10.0.0.2")},
	})
	webFrom := func(app string, port int32) *policyapi.NetworkPolicy {
		return mkPolicy("team", "web", sel("app", "a"), policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{{
			Ports: []policyapi.NetworkPolicyPort{tcp(port)}, From: []policyapi.NetworkPolicyPeer{{PodSelector: sel("app", app)}}}}})
	}
	inc.SetPolicy(webFrom("b", 80))
	first, err := inc.Compile()
	if err != nil {
		t.Fatal(err)
	}

	// A port change of a policy selecting only a: b's policy, the addresses
	// and the CIDR table stay the same objects.
	inc.SetPolicy(webFrom("b", 81))
	second, err := inc.Compile()
	if err != nil {
		t.Fatal(err)
	}
	if second.Endpoints["lxc-b"] != first.Endpoints["lxc-b"] {
		t.Error("lxc-b's policy was rebuilt though nothing selecting it changed")
	}
	if second.Endpoints["lxc-a"] == first.Endpoints["lxc-a"] {
		t.Error("lxc-a's policy is the old object though its rules changed")
	}
	if !sameMap(second.Addrs, first.Addrs) || !sameMap(second.CIDRs, first.CIDRs) {
		t.Error("Addrs or CIDRs were copied though no address or ipBlock changed")
	}

	// Nothing changed: the same result, object for object.
	third, err := inc.Compile()
	if err != nil {
		t.Fatal(err)
	}
	if !sameMap(third.Endpoints, second.Endpoints) || !sameMap(third.Addrs, second.Addrs) {
		t.Error("a compilation with no change built new maps")
	}

	// A new address for c changes Addrs only.
	inc.SetPod(mkPod("team", "c", ips("10.0.0.3", "10.0.0.9"), "app", "c"))
	fourth, err := inc.Compile()
	if err != nil {
		t.Fatal(err)
	}
	if sameMap(fourth.Addrs, third.Addrs) || fourth.Addrs[addr("10.0.0.9")].Identity == 0 {
		t.Errorf("c's new address: Addrs %v", fourth.Addrs)
	}
	if fourth.Endpoints["lxc-a"] != third.Endpoints["lxc-a"] {
		t.Error("lxc-a's policy was rebuilt by an address change of a pod it does not select")
	}
}

// TestIncrementalRecoversAfterError: a compilation that fails (a local
// endpoint listed twice) leaves no state behind; fixing the input compiles
// again.
func TestIncrementalRecoversAfterError(t *testing.T) {
	inc := NewIncremental()
	p := mkPod("team", "a", ips("10.0.0.1"), "app", "a")
	inc.SetPod(p)
	inc.SetIdentity(policyapi.IdentityKey(nil, p), policyapi.FirstPodIdentity)
	inc.SetPolicy(mkPolicy("team", "p", sel("app", "a"), policyapi.NetworkPolicySpec{}))
	le := LocalEndpoint{HostIfName: "lxc-a", Namespace: "team", PodName: "a", IPv4: addr("10.0.0.1")}
	inc.SetLocal([]LocalEndpoint{le, le})
	if _, err := inc.Compile(); err == nil {
		t.Fatal("endpoint listed twice: want an error")
	}
	if _, err := inc.Compile(); err == nil {
		t.Fatal("endpoint listed twice, second compilation: want the error again")
	}
	inc.SetLocal([]LocalEndpoint{le})
	d, err := inc.Compile()
	if err != nil {
		t.Fatalf("after the fix: %v", err)
	}
	if ep := d.Endpoints["lxc-a"]; ep == nil || !ep.IngressIsolated || len(ep.Rules) != 0 {
		t.Errorf("after the fix: lxc-a %+v, want isolated for ingress with no rules", ep)
	}
}

// sameMap reports whether a and b are the same map object.
func sameMap[M ~map[K]V, K comparable, V any](a, b M) bool {
	if len(a) != len(b) {
		return false
	}
	return fmt.Sprintf("%p", a) == fmt.Sprintf("%p", b)
}

// checkServicesDelta checks that d.Services is d.ServicesBase with exactly
// the frontends of d.ServicesChanged changed, every other entry the very
// pointer of the base; it describes the first difference.
func checkServicesDelta(d *Desired) string {
	changed := map[ServiceFrontend]bool{}
	for _, fe := range d.ServicesChanged {
		changed[fe] = true
	}
	for _, m := range []map[ServiceFrontend]*ServiceEntry{d.Services, d.ServicesBase} {
		for fe := range m {
			now, inNow := d.Services[fe]
			was, inBase := d.ServicesBase[fe]
			same := inNow == inBase && now == was
			if same == changed[fe] {
				return fmt.Sprintf("frontend %+v: listed as changed %v, but the entry went from %p (present %v) to %p (present %v)", fe, changed[fe], was, inBase, now, inNow)
			}
		}
	}
	for fe := range changed {
		_, inNow := d.Services[fe]
		_, inBase := d.ServicesBase[fe]
		if !inNow && !inBase {
			return fmt.Sprintf("frontend %+v listed as changed is in neither map", fe)
		}
	}
	return ""
}
