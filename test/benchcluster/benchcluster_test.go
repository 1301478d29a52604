package benchcluster

import (
	"net/netip"
	"slices"
	"testing"

	"lockstep.dev/lockstep/agent/enforcer"
	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/store"
)

// The cluster with its Services, loaded as the benchmarks load it,
// compiles to what the tools' reports say it is: every local endpoint, 1k
// frontends of 10 backends each, the app's pods on its http port; and a
// replaced backend changes that one backend only.
func TestLoadedClusterCompiles(t *testing.T) {
	c := New()
	c.AddServices()
	if len(c.Pods) != Namespaces*Apps*Replicas || len(c.Policies) != Namespaces*Apps || len(c.Services) != Namespaces*Apps || len(c.EndpointSlices) != Namespaces*Apps {
		t.Fatalf("cluster of %d pods, %d policies, %d Services, %d slices", len(c.Pods), len(c.Policies), len(c.Services), len(c.EndpointSlices))
	}
	st, err := store.New()
	if err != nil {
		t.Fatal(err)
	}
	if err := LoadStore(st, c); err != nil {
		t.Fatal(err)
	}
	compile := func() *policy.Desired {
		t.Helper()
		snap, err := enforcer.Snapshot(st.ReadTxn())
		if err != nil {
			t.Fatal(err)
		}
		d, err := policy.Compile(snap)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := compile()
	if len(d.Endpoints) != LocalEndpoints {
		t.Errorf("%d local endpoints compiled, want %d", len(d.Endpoints), LocalEndpoints)
	}
	if len(d.Services) != Namespaces*Apps {
		t.Fatalf("%d frontends compiled, want %d", len(d.Services), Namespaces*Apps)
	}
	// Service 47: app 7 of namespace 2.
	n, j := ServiceIndex(2, 7), 7
	fe := policy.ServiceFrontend{Addr: ServiceIP(n), Port: ServicePort, Proto: policyapi.ProtoTCP}
	var want []policy.ServiceBackend
	var cur []netip.Addr
	for k := range Replicas {
		a := netip.MustParseAddr(c.Pods[n*Replicas+k].Status.PodIP)
		cur = append(cur, a)
		want = append(want, policy.ServiceBackend{Addr: a, Port: uint16(8000 + j)})
	}
	if got := d.Services[fe]; got == nil || !slices.Equal(got.Backends, want) {
		t.Fatalf("frontend %v compiled to %+v, want backends %v", fe, got, want)
	}

	txn := st.WriteTxn()
	if err := store.UpsertEndpointSlice(txn, ReplacedBackend(n, 3, cur)); err != nil {
		t.Fatal(err)
	}
	txn.Commit()
	got := compile().Services[fe].Backends
	gone, added := 0, 0
	for _, b := range want {
		if !slices.Contains(got, b) {
			gone++
		}
	}
	for _, b := range got {
		if !slices.Contains(want, b) {
			added++
			if b.Addr != netip.MustParseAddr("10.3.0.3") {
				t.Errorf("new backend %v, want 10.3.0.3", b)
			}
		}
	}
	if len(got) != Replicas || gone != 1 || added != 1 {
		t.Errorf("after one replaced backend: %d backends, %d gone, %d new; want %d, 1, 1", len(got), gone, added, Replicas)
	}
}
