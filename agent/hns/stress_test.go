package hns

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"

	"lockstep.dev/lockstep/agent/enforcer"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/store"
	"lockstep.dev/lockstep/test/seedtest"
)

// TestStressChurnWithTransientFaults: label churn, policy churn (selectors,
// ipBlocks, ports, deletion), endpoints vanishing from HNS and coming back,
// and resyncs race for thousands of rounds while 30% of HNS calls fail,
// half of them after taking effect in part. Applies may fail, but only
// with the injected transient error; no request ever breaks an HNS
// invariant; and once the faults stop, one resync converges HNS to exactly
// the committed state.
func TestStressChurnWithTransientFaults(t *testing.T) {
	m := NewMemory()
	st := seedStore(t, m)
	txn := st.WriteTxn()
	attachLocal(t, txn, m, "c", netip.MustParseAddr("10.244.0.12"))
	attachLocal(t, txn, m, "d", netip.MustParseAddr("10.244.0.13"))
	must(t, store.UpsertPod(txn, seedtest.Pod("c", map[string]string{"app": "server", "l1": "v"})))
	must(t, store.UpsertPod(txn, seedtest.Pod("d", map[string]string{"l2": "v"})))
	remote := seedtest.Pod("r", map[string]string{"l3": "v"})
	remote.Status.PodIPs = []policyapi.PodIP{{IP: "10.244.1.5"}, {IP: "fd00::1:5"}}
	must(t, store.UpsertPod(txn, remote))
	txn.Commit()

	m.SetFaults(0.3, 1)
	e := enforcer.New(st, New(m), quiet)
	ctx := context.Background()
	rounds := 2000
	if testing.Short() {
		rounds = 200
	}
	var wg sync.WaitGroup
	var applies, failed atomic.Int64
	errc := make(chan error, 1)
	record := func(err error) {
		applies.Add(1)
		if err == nil {
			return
		}
		failed.Add(1)
		if !errors.Is(err, ErrTransient) {
			select {
			case errc <- err:
			default:
			}
		}
	}
	wg.Add(4)
	go func() { // labels
		defer wg.Done()
		for i := range rounds {
			labels := map[string]string{}
			if i%2 == 0 {
				labels["pod2"] = "yes"
			}
			if i%3 == 0 {
				labels[fmt.Sprintf("l%d", i%5)] = "v"
			}
			seedtest.SetPodLabels(t, st, "b", labels)
			record(e.Sync(ctx))
		}
	}()
	go func() { // policies
		defer wg.Done()
		for i := range rounds {
			txn := st.WriteTxn()
			var err error
			if i%4 == 3 {
				err = store.DeletePolicy(txn, "x", "churn")
			} else {
				err = store.UpsertPolicy(txn, churnPolicy(i))
			}
			if err != nil {
				txn.Abort()
				t.Error(err)
				return
			}
			txn.Commit()
			record(e.Sync(ctx))
		}
	}()
	go func() { // the CNI plugin recreating d's HNS endpoint
		defer wg.Done()
		for i := range rounds / 4 {
			if i%2 == 0 {
				m.RemoveEndpoint("ls-d")
			} else {
				m.AddEndpoint("ls-d")
			}
			record(e.Sync(ctx))
		}
		m.AddEndpoint("ls-d")
	}()
	go func() { // background reconcile
		defer wg.Done()
		for range rounds / 4 {
			record(e.Resync(ctx))
		}
	}()
	wg.Wait()
	select {
	case err := <-errc:
		t.Fatalf("an apply failed with more than the injected transient failure: %v", err)
	default:
	}
	if v := m.Violations(); len(v) > 0 {
		t.Fatalf("%d HNS requests broke an invariant, first: %v", len(v), v[0])
	}
	t.Logf("%d applies, %d failed transiently; %d faults injected", applies.Load(), failed.Load(), m.Faults())
	if m.Faults() == 0 || failed.Load() == 0 {
		t.Fatal("no fault was injected: the test proves nothing")
	}

	m.SetFaults(0, 0)
	must(t, e.Resync(ctx))
	d := committed(t, st)
	if len(d.Endpoints) != 4 {
		t.Fatalf("committed state has %d local endpoints, want 4", len(d.Endpoints))
	}
	assertMatches(t, m, d)
}

// churnPolicy is round i's version of policy x/churn: its selector, peers
// and ports change every round.
func churnPolicy(i int) *policyapi.NetworkPolicy {
	peer := policyapi.NetworkPolicyPeer{PodSelector: sel(fmt.Sprintf("l%d", i%5), "v")}
	var ports []policyapi.NetworkPolicyPort
	if i%3 != 0 {
		ports = append(ports, port(policyapi.TCP, int32(80+i%4)), port(policyapi.UDP, 5000, int32(5000+i%7)))
	}
	peers := []policyapi.NetworkPolicyPeer{peer}
	if i%5 == 1 {
		peers = append(peers, block("10.244.0.0/16", "10.244.0.0/24"), block("fd00::/16"))
	}
	spec := policyapi.NetworkPolicySpec{
		PodSelector: *sel(fmt.Sprintf("l%d", (i+1)%5), "v"),
		Ingress:     []policyapi.IngressRule{{Ports: ports, From: peers}},
	}
	if i%2 == 1 {
		spec.PolicyTypes = []policyapi.PolicyType{policyapi.PolicyTypeIngress, policyapi.PolicyTypeEgress}
		spec.Egress = []policyapi.EgressRule{{To: peers}}
	}
	return &policyapi.NetworkPolicy{ObjectMeta: policyapi.ObjectMeta{Namespace: "x", Name: "churn"}, Spec: spec}
}
