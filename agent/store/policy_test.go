package store

import (
	"testing"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

func pod(ns, name string, labels map[string]string) *policyapi.Pod {
	return &policyapi.Pod{ObjectMeta: policyapi.ObjectMeta{Namespace: ns, Name: name, Labels: labels}}
}

func allowFrom(ns, name string, from map[string]string) *policyapi.NetworkPolicy {
	return &policyapi.NetworkPolicy{
		ObjectMeta: policyapi.ObjectMeta{Namespace: ns, Name: name},
		Spec: policyapi.NetworkPolicySpec{
			Ingress: []policyapi.IngressRule{{From: []policyapi.NetworkPolicyPeer{{PodSelector: &policyapi.LabelSelector{MatchLabels: from}}}}},
		},
	}
}

// identityRefs returns identity key -> refs.
func identityRefs(t *testing.T, s *Store) map[policyapi.Peer]int {
	t.Helper()
	ids, err := Identities(s.ReadTxn(), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[policyapi.Peer]int{}
	for _, id := range ids {
		out[id.ID] = id.Refs
	}
	return out
}

// TestPolicyTablesIndexes exercises every index of the policy tables.
func TestPolicyTablesIndexes(t *testing.T) {
	s := mustStore(t)
	commit(t, s, func(txn *Txn) error {
		if err := UpsertNamespace(txn, &policyapi.Namespace{ObjectMeta: policyapi.ObjectMeta{Name: "x"}}); err != nil {
			return err
		}
		for _, p := range []*policyapi.Pod{
			pod("x", "a", map[string]string{"app": "web"}),
			pod("x", "b", map[string]string{"app": "web"}),
			pod("xy", "c", map[string]string{"app": "db"}),
		} {
			if err := UpsertPod(txn, p); err != nil {
				return err
			}
		}
		return UpsertPolicy(txn, allowFrom("x", "p", map[string]string{"app": "web"}))
	})
	txn := s.ReadTxn()
	web, err := PodByName(txn, nil, "x", "a")
	if err != nil || web == nil {
		t.Fatalf("pod x/a: %v, %v", web, err)
	}
	tests := []struct {
		table, index string
		args         []any
		want         int
	}{
		{TableNamespaces, IndexID, []any{"x"}, 1},
		{TablePods, IndexID, []any{"x", "a"}, 1},
		{TablePods, IndexID + "_prefix", []any{"x"}, 3}, // prefix: x and xy
		{TablePods, IndexIdentity, []any{web.IdentityKey}, 2},
		{TablePolicies, IndexID, []any{"x", "p"}, 1},
		{TableIdentities, IndexKey, []any{web.IdentityKey}, 1},
		{TableIdentities, IndexID, []any{policyapi.FirstPodIdentity}, 1},
		{TableSelectors, IndexID + "_prefix", []any{""}, 2}, // podSelector {} and the peer
	}
	for _, tc := range tests {
		it, err := txn.get(tc.table, tc.index, tc.args...)
		if err != nil {
			t.Fatalf("%s.%s%v: %v", tc.table, tc.index, tc.args, err)
		}
		n := 0
		for raw := it.Next(); raw != nil; raw = it.Next() {
			n++
		}
		if n != tc.want {
			t.Errorf("%s.%s%v: got %d rows, want %d", tc.table, tc.index, tc.args, n, tc.want)
		}
	}
	if _, err := txn.get(TableIdentities, IndexID, 256); err == nil {
		t.Error("identity lookup with an int: want error")
	}
}

// TestIdentityRefcount: an identity exists exactly while a pod holds it,
// and a label change moves the reference in the same transaction.
func TestIdentityRefcount(t *testing.T) {
	s := mustStore(t)
	commit(t, s, func(txn *Txn) error {
		if err := UpsertPod(txn, pod("x", "a", map[string]string{"app": "web"})); err != nil {
			return err
		}
		return UpsertPod(txn, pod("x", "b", map[string]string{"app": "web"}))
	})
	if got := identityRefs(t, s); len(got) != 1 || got[policyapi.FirstPodIdentity] != 2 {
		t.Fatalf("two pods, one label set: identities %v, want {256: 2}", got)
	}
	// b loses the label: the old identity keeps one ref, a new one appears.
	commit(t, s, func(txn *Txn) error { return UpsertPod(txn, pod("x", "b", nil)) })
	if got := identityRefs(t, s); len(got) != 2 || got[policyapi.FirstPodIdentity] != 1 || got[policyapi.FirstPodIdentity+1] != 1 {
		t.Fatalf("after relabel: identities %v, want {256: 1, 257: 1}", got)
	}
	for _, tc := range []struct {
		id   policyapi.Peer
		want bool
	}{{policyapi.FirstPodIdentity, true}, {policyapi.FirstPodIdentity + 1, true}, {policyapi.FirstPodIdentity + 2, false}} {
		got, err := IdentityByID(s.ReadTxn(), nil, tc.id)
		if err != nil || (got != nil) != tc.want || (got != nil && got.ID != tc.id) {
			t.Errorf("IdentityByID(%d) = %+v, %v; want found %v", tc.id, got, err, tc.want)
		}
	}
	// a is the last holder: deleting it deletes the identity in that commit.
	commit(t, s, func(txn *Txn) error { return DeletePod(txn, "x", "a") })
	if got := identityRefs(t, s); len(got) != 1 || got[policyapi.FirstPodIdentity+1] != 1 {
		t.Fatalf("after delete: identities %v, want {257: 1}", got)
	}
	// A namespace's labels are part of its pods' identities.
	commit(t, s, func(txn *Txn) error {
		return UpsertNamespace(txn, &policyapi.Namespace{ObjectMeta: policyapi.ObjectMeta{Name: "x", Labels: map[string]string{"team": "a"}}})
	})
	if got := identityRefs(t, s); len(got) != 1 || got[policyapi.FirstPodIdentity+2] != 1 {
		t.Fatalf("after namespace relabel: identities %v, want {258: 1} (x/b re-identified)", got)
	}
	// An aborted transaction changes nothing.
	txn := s.WriteTxn()
	if err := DeletePod(txn, "x", "b"); err != nil {
		t.Fatal(err)
	}
	txn.Abort()
	if len(identityRefs(t, s)) != 1 {
		t.Fatal("aborted delete removed an identity")
	}
}

// TestSelectorRefcount: a selector two policies share survives the edit
// of one of them, and leaves with its last reference.
func TestSelectorRefcount(t *testing.T) {
	s := mustStore(t)
	web := map[string]string{"app": "web"}
	commit(t, s, func(txn *Txn) error {
		if err := UpsertPolicy(txn, allowFrom("x", "p1", web)); err != nil {
			return err
		}
		return UpsertPolicy(txn, allowFrom("x", "p2", web))
	})
	refs := func() map[string]int {
		sels, err := Selectors(s.ReadTxn(), nil)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, sel := range sels {
			out[sel.Key] = sel.Refs
		}
		return out
	}
	peerKey := policySelectors(allowFrom("x", "p1", web))[1].Key
	if got := refs(); len(got) != 2 || got[peerKey] != 2 {
		t.Fatalf("two policies sharing a peer: %v", got)
	}
	commit(t, s, func(txn *Txn) error { return UpsertPolicy(txn, allowFrom("x", "p1", map[string]string{"app": "db"})) })
	if got := refs(); len(got) != 3 || got[peerKey] != 1 {
		t.Fatalf("after editing p1: %v", got)
	}
	commit(t, s, func(txn *Txn) error { return DeletePolicy(txn, "x", "p2") })
	if got := refs(); got[peerKey] != 0 || len(got) != 2 {
		t.Fatalf("after deleting p2 the web selector must be gone: %v", got)
	}
	if _, ok := refs()[peerKey]; ok {
		t.Fatal("selector with no reference left in the table")
	}
}
