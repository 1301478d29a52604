package seedtest

import (
	"net/netip"
	"testing"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/store"
)

// Store returns a store holding the seed's cluster.
func Store(tb testing.TB) *store.Store {
	tb.Helper()
	st, err := store.New()
	if err != nil {
		tb.Fatal(err)
	}
	txn := st.WriteTxn()
	defer txn.Abort()
	must := func(err error) {
		tb.Helper()
		if err != nil {
			tb.Fatal(err)
		}
	}
	must(store.UpsertNamespace(txn, &policyapi.Namespace{ObjectMeta: policyapi.ObjectMeta{Name: "x"}}))
	must(store.UpsertPod(txn, Pod("a", map[string]string{"app": "server"})))
	must(store.UpsertPod(txn, Pod("b", map[string]string{"pod2": "yes"})))
	must(store.UpsertPolicy(txn, &policyapi.NetworkPolicy{
		ObjectMeta: policyapi.ObjectMeta{Namespace: "x", Name: "allow-b"},
		Spec: policyapi.NetworkPolicySpec{
			PodSelector: policyapi.LabelSelector{MatchLabels: map[string]string{"app": "server"}},
			Ingress: []policyapi.IngressRule{{From: []policyapi.NetworkPolicyPeer{{
				PodSelector: &policyapi.LabelSelector{MatchExpressions: []policyapi.LabelSelectorRequirement{{Key: "pod2", Operator: policyapi.OpExists}}},
			}}}},
		},
	}))
	for i, name := range []string{"a", "b"} {
		must(store.AttachEndpoint(txn, Endpoint(name, netip.AddrFrom4([4]byte{10, 244, 0, byte(10 + i)}))))
	}
	txn.Commit()
	return st
}

// Endpoint is a Ready local endpoint ls-<name> of pod x/<name> at addr.
func Endpoint(name string, addr netip.Addr) *store.Endpoint {
	return &store.Endpoint{
		Attachment: store.Attachment{ContainerID: "c-" + name, IfName: "eth0"},
		HostIfName: "ls-" + name,
		Pod:        store.PodRef{Namespace: "x", Name: name},
		Addresses:  []store.AddressRef{{Pool: "10.244.0.0/24", Addr: addr, Bits: 24}},
		State:      store.EndpointReady,
	}
}

// Pod is pod x/<name> with labels.
func Pod(name string, labels map[string]string) *policyapi.Pod {
	return &policyapi.Pod{ObjectMeta: policyapi.ObjectMeta{Namespace: "x", Name: name, Labels: labels}}
}

// SetPodLabels commits pod x/<name> with labels. It reports a failure
// with tb.Error, so it may run on a goroutine of the test.
func SetPodLabels(tb testing.TB, st *store.Store, name string, labels map[string]string) {
	tb.Helper()
	txn := st.WriteTxn()
	defer txn.Abort()
	if err := store.UpsertPod(txn, Pod(name, labels)); err != nil {
		tb.Error(err)
		return
	}
	txn.Commit()
}
