package enforcer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"testing"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/store"
)

// recordingDataplane keeps the last state applied.
type recordingDataplane struct {
	last    *policy.Desired
	applies int
}

func (d *recordingDataplane) Attach(string) error { return nil }
func (d *recordingDataplane) Detach(string) error { return nil }
func (d *recordingDataplane) Apply(want *policy.Desired) error {
	d.last = want
	d.applies++
	return nil
}

// storeWorld makes random writes to a store through its helpers, as the
// manifests source and the CNI endpoints service do.
type storeWorld struct {
	rng *rand.Rand
	st  *store.Store
}

func (w *storeWorld) pick(xs ...string) string { return xs[w.rng.IntN(len(xs))] }

func (w *storeWorld) labels(keys ...string) map[string]string {
	m := map[string]string{}
	for range w.rng.IntN(3) {
		m[w.pick(keys...)] = w.pick("x", "y")
	}
	return m
}

func (w *storeWorld) addr() netip.Addr {
	return netip.AddrFrom4([4]byte{10, 0, 0, byte(1 + w.rng.IntN(12))})
}

func (w *storeWorld) pod() *policyapi.Pod {
	p := &policyapi.Pod{ObjectMeta: policyapi.ObjectMeta{Namespace: w.pick("a", "b", "c"), Name: w.pick("p0", "p1", "p2", "p3", "p4"), Labels: w.labels("app", "tier")}}
	if w.rng.IntN(2) == 0 {
		p.Spec.Containers = []policyapi.Container{{Name: "c", Ports: []policyapi.ContainerPort{{Name: w.pick("http", "dns"), ContainerPort: int32(80 + w.rng.IntN(3))}}}}
	}
	for range w.rng.IntN(3) {
		p.Status.PodIPs = append(p.Status.PodIPs, policyapi.PodIP{IP: w.addr().String()})
	}
	if w.rng.IntN(10) == 0 {
		p.Status.Phase = policyapi.PodSucceeded
	}
	return p
}

func (w *storeWorld) selector() *policyapi.LabelSelector {
	if w.rng.IntN(3) == 0 {
		return &policyapi.LabelSelector{}
	}
	return &policyapi.LabelSelector{MatchLabels: w.labels("app", "tier")}
}

func (w *storeWorld) policy() *policyapi.NetworkPolicy {
	np := &policyapi.NetworkPolicy{ObjectMeta: policyapi.ObjectMeta{Namespace: w.pick("a", "b", "c"), Name: w.pick("n0", "n1", "n2")}}
	np.Spec.PodSelector = *w.selector()
	peer := func() policyapi.NetworkPolicyPeer {
		switch w.rng.IntN(3) {
		case 0:
			return policyapi.NetworkPolicyPeer{PodSelector: w.selector()}
		case 1:
			return policyapi.NetworkPolicyPeer{NamespaceSelector: &policyapi.LabelSelector{MatchLabels: w.labels("team")}, PodSelector: w.selector()}
		}
		return policyapi.NetworkPolicyPeer{IPBlock: &policyapi.IPBlock{CIDR: w.pick("10.0.0.0/29", "10.0.0.0/24", "0.0.0.0/0")}}
	}
	port := func() []policyapi.NetworkPolicyPort {
		if w.rng.IntN(2) == 0 {
			return []policyapi.NetworkPolicyPort{{Port: policyapi.FromString(w.pick("http", "dns"))}}
		}
		return []policyapi.NetworkPolicyPort{{Port: policyapi.FromInt(int32(80 + w.rng.IntN(3)))}}
	}
	for range w.rng.IntN(3) {
		np.Spec.Ingress = append(np.Spec.Ingress, policyapi.IngressRule{Ports: port(), From: []policyapi.NetworkPolicyPeer{peer()}})
	}
	for range w.rng.IntN(3) {
		np.Spec.Egress = append(np.Spec.Egress, policyapi.EgressRule{Ports: port(), To: []policyapi.NetworkPolicyPeer{peer()}})
	}
	return np
}

func (w *storeWorld) service() *policyapi.Service {
	svc := &policyapi.Service{ObjectMeta: policyapi.ObjectMeta{Namespace: w.pick("a", "b"), Name: w.pick("s0", "s1")}}
	svc.Spec.ClusterIP = w.pick("10.96.0.1", "10.96.0.2")
	svc.Spec.Ports = []policyapi.ServicePort{{Name: "http", Port: 80}, {Name: "dns", Port: 53, Protocol: policyapi.UDP}}
	if w.rng.IntN(3) == 0 {
		svc.Spec.SessionAffinity = policyapi.ServiceAffinityClientIP
	}
	return svc
}

func (w *storeWorld) slice() *policyapi.EndpointSlice {
	svc := w.pick("s0", "s1")
	sl := &policyapi.EndpointSlice{
		ObjectMeta:  policyapi.ObjectMeta{Namespace: w.pick("a", "b"), Name: svc + "-" + w.pick("0", "1"), Labels: map[string]string{policyapi.ServiceNameLabel: svc}},
		AddressType: policyapi.AddressTypeIPv4,
	}
	name, port := w.pick("http", "dns"), int32(8080+w.rng.IntN(2))
	proto := policyapi.TCP
	if name == "dns" {
		proto = policyapi.UDP
	}
	sl.Ports = []policyapi.EndpointSlicePort{{Name: &name, Protocol: &proto, Port: &port}}
	for range w.rng.IntN(3) {
		ready := w.rng.IntN(4) != 0
		sl.Endpoints = append(sl.Endpoints, policyapi.SliceEndpoint{Addresses: []string{w.addr().String()}, Conditions: policyapi.EndpointConditions{Ready: &ready}})
	}
	return sl
}

// write makes one random write in txn.
func (w *storeWorld) write(txn *store.Txn) error {
	switch n := w.rng.IntN(100); {
	case n < 8:
		return store.UpsertNamespace(txn, &policyapi.Namespace{ObjectMeta: policyapi.ObjectMeta{Name: w.pick("a", "b", "c"), Labels: w.labels("team")}})
	case n < 10:
		return store.DeleteNamespace(txn, w.pick("a", "b", "c"))
	case n < 40:
		return store.UpsertPod(txn, w.pod())
	case n < 50:
		return store.DeletePod(txn, w.pick("a", "b", "c"), w.pick("p0", "p1", "p2", "p3", "p4"))
	case n < 65:
		return store.UpsertPolicy(txn, w.policy())
	case n < 70:
		return store.DeletePolicy(txn, w.pick("a", "b", "c"), w.pick("n0", "n1", "n2"))
	case n < 74:
		return store.UpsertService(txn, w.service())
	case n < 75:
		return store.DeleteService(txn, w.pick("a", "b"), w.pick("s0", "s1"))
	case n < 80:
		return store.UpsertEndpointSlice(txn, w.slice())
	case n < 81:
		return store.DeleteEndpointSlice(txn, w.pick("a", "b"), w.pick("s0-0", "s0-1", "s1-0"))
	}
	// A local endpoint: attached (Pending), made Ready, or released.
	i := w.rng.IntN(4)
	att := store.Attachment{ContainerID: fmt.Sprintf("c%d", i), IfName: "eth0"}
	old, err := store.EndpointByAttachment(txn, nil, att)
	if err != nil {
		return err
	}
	switch {
	case old == nil:
		a := netip.AddrFrom4([4]byte{10, 0, 0, byte(100 + i)})
		if w.rng.IntN(4) == 0 {
			a = w.addr() // an address a remote pod may claim too
		}
		return store.AttachEndpoint(txn, &store.Endpoint{
			Attachment: att, HostIfName: fmt.Sprintf("lxc%d", i), State: store.EndpointPending,
			Pod:       store.PodRef{Namespace: w.pick("a", "b", "c"), Name: w.pick("p0", "p1", "p2", "p3", "p4")},
			Addresses: []store.AddressRef{{Pool: fmt.Sprintf("pool%d", i), Addr: a, Bits: 24}},
		})
	case old.State == store.EndpointPending:
		ready := old.Copy()
		ready.State = store.EndpointReady
		return store.UpsertEndpoint(txn, ready)
	default:
		_, err := store.ReleaseEndpoint(txn, att)
		return err
	}
}

// TestEnforcerIncrementalMatchesSnapshot: random writes to the store, and
// after every Sync the dataplane holds what a full compilation of a
// snapshot of the store gives: the change log, the local endpoints and
// their addresses reach the incremental compiler as the snapshot reads
// them.
func TestEnforcerIncrementalMatchesSnapshot(t *testing.T) {
	steps := 3000
	if testing.Short() {
		steps = 500
	}
	ctx := context.Background()
	for seed := range uint64(3) {
		st, err := store.New()
		if err != nil {
			t.Fatal(err)
		}
		w := &storeWorld{rng: rand.New(rand.NewPCG(seed, 7)), st: st}
		dp := &recordingDataplane{}
		e := New(st, dp, nil)
		compared, frontends := 0, 0
		for step := range steps {
			for range 1 + w.rng.IntN(3) { // transactions between two syncs
				txn := st.WriteTxn()
				for range 1 + w.rng.IntN(2) {
					if err := w.write(txn); err != nil {
						t.Fatalf("seed %d step %d: write: %v", seed, step, err)
					}
				}
				txn.Commit()
			}
			var syncErr error
			if w.rng.IntN(50) == 0 {
				syncErr = e.Resync(ctx)
			} else {
				syncErr = e.Sync(ctx)
			}
			txn := st.ReadTxn()
			if store.Revision(txn, "") == 0 {
				continue // only no-op writes so far: Sync has nothing to apply
			}
			snap, err := Snapshot(txn)
			if err != nil {
				t.Fatal(err)
			}
			want, wantErr := policy.Compile(snap)
			if (syncErr != nil) != (wantErr != nil) {
				t.Fatalf("seed %d step %d: sync error %v, full compile error %v", seed, step, syncErr, wantErr)
			}
			if wantErr != nil {
				continue
			}
			if !reflect.DeepEqual(withoutChange(dp.last), want) {
				t.Fatalf("seed %d step %d: the dataplane holds\n%+v\nwant\n%+v", seed, step, withoutChange(dp.last), want)
			}
			compared++
			frontends += len(want.Services)
		}
		if compared < steps/2 || dp.applies >= compared || frontends < compared {
			t.Errorf("seed %d: %d states compared, %d applies, %d service frontends: the world is too tame, or no apply was ever skipped", seed, compared, dp.applies, frontends)
		}
	}
}

// TestEnforcerFallsBackWhenChangeLogTrimmed: an enforcer further behind
// than the change log reaches reads the whole store.
func TestEnforcerFallsBackWhenChangeLogTrimmed(t *testing.T) {
	st, err := store.New()
	if err != nil {
		t.Fatal(err)
	}
	dp := &recordingDataplane{}
	e := New(st, dp, nil)
	w := &storeWorld{rng: rand.New(rand.NewPCG(1, 2)), st: st}
	if err := e.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range store.ChangeLogRevisions + 50 {
		txn := st.WriteTxn()
		if err := w.write(txn); err != nil {
			t.Fatal(err)
		}
		txn.Commit()
	}
	if _, err := store.ChangesSince(st.ReadTxn(), e.feed.rev); err == nil {
		t.Fatalf("the change log still reaches revision %d; the test proves nothing", e.feed.rev)
	}
	if err := e.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	snap, err := Snapshot(st.ReadTxn())
	if err != nil {
		t.Fatal(err)
	}
	want, err := policy.Compile(snap)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(withoutChange(dp.last), want) {
		t.Fatalf("after the fallback the dataplane holds\n%+v\nwant\n%+v", withoutChange(dp.last), want)
	}
}

// withoutChange is d without what says how its Services came from an
// earlier result (Desired.ServicesBase), which a full Compile never says.
func withoutChange(d *policy.Desired) *policy.Desired {
	if d == nil {
		return nil
	}
	c := *d
	c.ServicesBase, c.ServicesChanged = nil, nil
	return &c
}
