package store

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/hashicorp/go-memdb"
)

func mustStore(t *testing.T) *Store {
	t.Helper()
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func endpoint(cid, ifname, host, uid string, addrs ...string) *Endpoint {
	e := &Endpoint{
		Attachment: Attachment{ContainerID: cid, IfName: ifname},
		HostIfName: host,
		Pod:        PodRef{Namespace: "ns", Name: "pod-" + cid, UID: uid},
		State:      EndpointPending,
		Created:    time.Unix(1, 0),
	}
	for _, a := range addrs {
		addr := netip.MustParseAddr(a)
		pool, bits := "v4", 24
		if addr.Is6() {
			pool, bits = "v6", 120
		}
		e.Addresses = append(e.Addresses, AddressRef{Pool: pool, Addr: addr, Bits: bits})
	}
	return e
}

func commit(t *testing.T, s *Store, fn func(*Txn) error) {
	t.Helper()
	if err := s.Update(fn); err != nil {
		t.Fatal(err)
	}
}

// TestSchemaIndexes exercises every index of every table.
func TestSchemaIndexes(t *testing.T) {
	s := mustStore(t)
	commit(t, s, func(txn *Txn) error {
		for _, p := range []Pool{
			{Name: "v4", CIDR: netip.MustParsePrefix("10.244.0.0/24")},
			{Name: "v6", CIDR: netip.MustParsePrefix("fd00::/120")},
		} {
			if err := UpsertPool(txn, p); err != nil {
				return err
			}
		}
		for _, e := range []*Endpoint{
			endpoint("c1", "eth0", "ls1", "uid-1", "10.244.0.2", "fd00::2"),
			endpoint("c1", "net1", "ls2", "uid-1", "10.244.0.3"),
			endpoint("c2", "eth0", "ls3", "", "10.244.0.4"),
		} {
			if err := AttachEndpoint(txn, e); err != nil {
				return err
			}
		}
		ready := endpoint("c2", "eth0", "ls3", "", "10.244.0.4")
		ready.State = EndpointReady
		if err := UpsertEndpoint(txn, ready); err != nil {
			return err
		}
		for _, b := range []string{"iptables-legacy", "ebpf"} {
			if err := UpsertCleanup(txn, &Cleanup{Backend: b}); err != nil {
				return err
			}
		}
		return nil
	})

	txn := s.ReadTxn()
	count := func(table, index string, args ...any) int {
		t.Helper()
		it, err := txn.get(table, index, args...)
		if err != nil {
			t.Fatalf("%s.%s(%v): %v", table, index, args, err)
		}
		n := 0
		for raw := it.Next(); raw != nil; raw = it.Next() {
			n++
		}
		return n
	}
	v4, v6 := netip.MustParseAddr("10.244.0.2"), netip.MustParseAddr("fd00::2")
	tests := []struct {
		table, index string
		args         []any
		want         int
	}{
		{TablePools, IndexID, []any{"v4"}, 1},
		{TablePools, IndexID, []any{"nope"}, 0},
		{TablePools, IndexID + "_prefix", []any{"v"}, 2},
		{TableAllocations, IndexID, []any{"v4", v4}, 1},
		{TableAllocations, IndexID, []any{"v6", v6}, 1},
		{TableAllocations, IndexID, []any{"v6", v4}, 0}, // same address, other pool
		{TableAllocations, IndexID + "_prefix", []any{"v4"}, 3},
		{TableAllocations, IndexID + "_prefix", []any{"v6"}, 1},
		{TableAllocations, IndexAttachment, []any{"c1", "eth0"}, 2},
		{TableAllocations, IndexAttachment + "_prefix", []any{"c1"}, 3},
		{TableAllocations, IndexPodUID, []any{"uid-1"}, 3},
		{TableEndpoints, IndexID, []any{"c1", "eth0"}, 1},
		{TableEndpoints, IndexID + "_prefix", []any{"c1"}, 2},
		{TableEndpoints, IndexID + "_prefix", []any{"c"}, 3},
		{TableEndpoints, IndexHostIf, []any{"ls3"}, 1},
		{TableEndpoints, IndexPodUID, []any{"uid-1"}, 2},
		{TableEndpoints, IndexState, []any{EndpointPending}, 2},
		{TableEndpoints, IndexState, []any{EndpointReady}, 1},
		{TableRevisions, IndexID, []any{TableEndpoints}, 1},
		{TableCleanups, IndexID, []any{"iptables-legacy"}, 1},
		{TableCleanups, IndexID, []any{"iptables-nft"}, 0},
		{TableCleanups, IndexID + "_prefix", []any{"iptables"}, 1},
	}
	for _, tc := range tests {
		if got := count(tc.table, tc.index, tc.args...); got != tc.want {
			t.Errorf("%s.%s%v: got %d rows, want %d", tc.table, tc.index, tc.args, got, tc.want)
		}
	}

	// A prefix of a container ID must not match another container ID.
	if got := count(TableEndpoints, IndexID, "c", "eth0"); got != 0 {
		t.Errorf("exact lookup (c, eth0) matched %d rows", got)
	}
	// Wrong argument types are errors, not silent misses.
	if _, err := txn.get(TableAllocations, IndexID, "v4", "10.244.0.2"); err == nil {
		t.Error("allocation lookup with a string address: want error")
	}
	if _, err := txn.get(TableEndpoints, IndexState, 2); err == nil {
		t.Error("state lookup with an int: want error")
	}
}

func TestAllocationNeverOverwritten(t *testing.T) {
	s := mustStore(t)
	commit(t, s, func(txn *Txn) error { return AttachEndpoint(txn, endpoint("a", "eth0", "lsa", "", "10.244.0.2")) })

	txn := s.WriteTxn()
	defer txn.Abort()
	err := AttachEndpoint(txn, endpoint("b", "eth0", "lsb", "", "10.244.0.2"))
	if !errors.Is(err, ErrAddressInUse) {
		t.Fatalf("second owner of 10.244.0.2: got %v, want ErrAddressInUse", err)
	}
	err = UpsertEndpoint(txn, endpoint("c", "eth0", "lsa", ""))
	if err == nil {
		t.Fatal("second endpoint on host interface lsa: want error")
	}
}

func TestReleaseIsOneTransaction(t *testing.T) {
	s := mustStore(t)
	att := Attachment{ContainerID: "a", IfName: "eth0"}
	commit(t, s, func(txn *Txn) error {
		return AttachEndpoint(txn, endpoint("a", "eth0", "lsa", "u", "10.244.0.2", "fd00::2"))
	})

	// An aborted release changes nothing.
	txn := s.WriteTxn()
	if e, err := ReleaseEndpoint(txn, att); err != nil || e == nil {
		t.Fatalf("release: %v, %v", e, err)
	}
	txn.Abort()
	read := s.ReadTxn()
	if allocs, _ := AllocationsByAttachment(read, nil, att); len(allocs) != 2 {
		t.Fatalf("after abort: %d allocations, want 2", len(allocs))
	}

	commit(t, s, func(txn *Txn) error {
		_, err := ReleaseEndpoint(txn, att)
		return err
	})
	read = s.ReadTxn()
	if e, _ := EndpointByAttachment(read, nil, att); e != nil {
		t.Fatal("endpoint survived release")
	}
	for _, pool := range []string{"v4", "v6"} {
		if n, _ := CountAllocations(read, pool); n != 0 {
			t.Fatalf("pool %s still has %d allocations", pool, n)
		}
	}
	// Releasing again is a no-op.
	commit(t, s, func(txn *Txn) error {
		e, err := ReleaseEndpoint(txn, att)
		if e != nil {
			t.Error("second release returned an endpoint")
		}
		return err
	})
}

func TestWatchFiresOnCommitOnly(t *testing.T) {
	s := mustStore(t)
	att := Attachment{ContainerID: "a", IfName: "eth0"}
	ws := memdb.NewWatchSet()
	if e, err := EndpointByAttachment(s.ReadTxn(), ws, att); err != nil || e != nil {
		t.Fatal(e, err)
	}

	txn := s.WriteTxn()
	if err := AttachEndpoint(txn, endpoint("a", "eth0", "lsa", "", "10.244.0.2")); err != nil {
		t.Fatal(err)
	}
	if !ws.Watch(time.After(20 * time.Millisecond)) {
		t.Fatal("watch fired before commit")
	}
	txn.Commit()
	if ws.Watch(time.After(time.Second)) {
		t.Fatal("watch did not fire after commit")
	}
}

func TestRevisions(t *testing.T) {
	s := mustStore(t)
	att := Attachment{ContainerID: "a", IfName: "eth0"}
	commit(t, s, func(txn *Txn) error { return AttachEndpoint(txn, endpoint("a", "eth0", "lsa", "", "10.244.0.2")) })
	commit(t, s, func(txn *Txn) error { return UpsertPool(txn, Pool{Name: "v4"}) })
	commit(t, s, func(txn *Txn) error {
		e, _ := EndpointByAttachment(txn, nil, att)
		e = e.Copy()
		e.State = EndpointReady
		return UpsertEndpoint(txn, e)
	})
	read := s.ReadTxn()
	e, _ := EndpointByAttachment(read, nil, att)
	if e.CreateRevision != 1 || e.ModifyRevision != 3 {
		t.Errorf("endpoint revisions: create %d modify %d, want 1 and 3", e.CreateRevision, e.ModifyRevision)
	}
	for table, want := range map[string]uint64{TableEndpoints: 3, TableAllocations: 1, TablePools: 2, "": 3} {
		if got := Revision(read, table); got != want {
			t.Errorf("revision of %q: %d, want %d", table, got, want)
		}
	}
	if err := UpsertPool(read, Pool{Name: "x"}); err == nil {
		t.Error("write helper on a read transaction: want error")
	}
}

func TestCleanupRecordKeepsItsRevisions(t *testing.T) {
	s := mustStore(t)
	commit(t, s, func(txn *Txn) error {
		return UpsertCleanup(txn, &Cleanup{Backend: "iptables-legacy", Reason: "dataplane changed"})
	})
	commit(t, s, func(txn *Txn) error {
		return UpsertCleanup(txn, &Cleanup{Backend: "iptables-legacy", Reason: "dataplane changed", Attempts: 1, LastError: "exit status 4"})
	})
	got, err := CleanupByBackend(s.ReadTxn(), nil, "iptables-legacy")
	if err != nil || got == nil {
		t.Fatalf("CleanupByBackend = %v, %v", got, err)
	}
	if got.CreateRevision != 1 || got.ModifyRevision != 2 || got.Attempts != 1 {
		t.Errorf("record = %+v; want created at 1, modified at 2, 1 attempt", got)
	}
	commit(t, s, func(txn *Txn) error { return DeleteCleanup(txn, "iptables-legacy") })
	commit(t, s, func(txn *Txn) error { return DeleteCleanup(txn, "iptables-legacy") }) // idempotent
	if all, _ := Cleanups(s.ReadTxn(), nil); len(all) != 0 {
		t.Errorf("after delete: %d records left", len(all))
	}
	txn := s.WriteTxn()
	defer txn.Abort()
	if err := UpsertCleanup(txn, &Cleanup{}); err == nil {
		t.Error("a clean-up without a backend was accepted")
	}
}

// TestWritesCountsWhatAFailedChangeWrote: reads leave Writes as it was;
// a helper that fails before it writes leaves it too, and one that fails
// half-way (the second address of an endpoint is taken) does not, which
// is how the agent's group commit tells a change it may simply leave out
// of a transaction from one it must abort.
func TestWritesCountsWhatAFailedChangeWrote(t *testing.T) {
	s := mustStore(t)
	commit(t, s, func(txn *Txn) error { return AttachEndpoint(txn, endpoint("a", "eth0", "lsa", "", "10.244.0.2")) })

	txn := s.WriteTxn()
	defer txn.Abort()
	steps := []struct {
		name      string
		fn        func() error
		wantErr   bool
		wantWrote bool
	}{
		{"read", func() error {
			_, err := EndpointByAttachment(txn, nil, Attachment{ContainerID: "a", IfName: "eth0"})
			return err
		}, false, false},
		{"attach an attached endpoint", func() error { return AttachEndpoint(txn, endpoint("a", "eth0", "lsa", "")) }, true, false},
		{"attach with a taken second address", func() error {
			return AttachEndpoint(txn, endpoint("b", "eth0", "lsb", "", "fd00::2", "10.244.0.2"))
		}, true, true},
		{"release", func() error { _, err := ReleaseEndpoint(txn, Attachment{ContainerID: "a", IfName: "eth0"}); return err }, false, true},
	}
	for _, st := range steps {
		before := txn.Writes()
		err := st.fn()
		if (err != nil) != st.wantErr {
			t.Errorf("%s: error %v, want error: %v", st.name, err, st.wantErr)
		}
		if wrote := txn.Writes() != before; wrote != st.wantWrote {
			t.Errorf("%s: Writes went from %d to %d; want a write: %v", st.name, before, txn.Writes(), st.wantWrote)
		}
	}
}
