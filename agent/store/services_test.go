package store

import (
	"testing"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

func service(ns, name, clusterIP string) *policyapi.Service {
	return &policyapi.Service{
		ObjectMeta: policyapi.ObjectMeta{Namespace: ns, Name: name},
		Spec:       policyapi.ServiceSpec{ClusterIP: clusterIP, Ports: []policyapi.ServicePort{{Port: 80}}},
	}
}

func slice(ns, name, svc string, addrs ...string) *policyapi.EndpointSlice {
	s := &policyapi.EndpointSlice{ObjectMeta: policyapi.ObjectMeta{Namespace: ns, Name: name}, AddressType: policyapi.AddressTypeIPv4}
	if svc != "" {
		s.Labels = map[string]string{policyapi.ServiceNameLabel: svc}
	}
	for _, a := range addrs {
		s.Endpoints = append(s.Endpoints, policyapi.SliceEndpoint{Addresses: []string{a}})
	}
	return s
}

// TestServiceTablesIndexes exercises every index of the Service and
// EndpointSlice tables.
func TestServiceTablesIndexes(t *testing.T) {
	s := mustStore(t)
	commit(t, s, func(txn *Txn) error {
		for _, svc := range []*policyapi.Service{service("x", "web", "10.96.0.1"), service("x", "db", "10.96.0.2"), service("xy", "web", "10.96.0.3")} {
			if err := UpsertService(txn, svc); err != nil {
				return err
			}
		}
		for _, sl := range []*policyapi.EndpointSlice{
			slice("x", "web-1", "web", "10.0.0.1"),
			slice("x", "web-2", "web", "10.0.0.2"),
			slice("x", "db-1", "db"),
			slice("xy", "web-1", "web"),
			slice("x", "manual", ""), // names no Service
		} {
			if err := UpsertEndpointSlice(txn, sl); err != nil {
				return err
			}
		}
		return nil
	})
	txn := s.ReadTxn()
	tests := []struct {
		table, index string
		args         []any
		want         int
	}{
		{TableServices, IndexID, []any{"x", "web"}, 1},
		{TableServices, IndexID, []any{"x", "we"}, 0},
		{TableServices, IndexID + "_prefix", []any{"x"}, 3}, // x and xy
		{TableServices, IndexID + "_prefix", []any{"x", "w"}, 1},
		{TableEndpointSlices, IndexID, []any{"x", "web-1"}, 1},
		{TableEndpointSlices, IndexID + "_prefix", []any{"x", "web-"}, 2},
		{TableEndpointSlices, IndexService, []any{"x", "web"}, 2},
		{TableEndpointSlices, IndexService, []any{"xy", "web"}, 1},
		{TableEndpointSlices, IndexService, []any{"x", "db"}, 1},
		{TableEndpointSlices, IndexService, []any{"x", ""}, 0}, // the unlabelled slice is not indexed
		{TableEndpointSlices, IndexService + "_prefix", []any{"x"}, 4},
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
	if got, err := EndpointSlicesOfService(txn, nil, "x", "web"); err != nil || len(got) != 2 {
		t.Errorf("EndpointSlicesOfService(x, web) = %d slices, %v; want 2", len(got), err)
	}
	if _, err := txn.get(TableEndpointSlices, IndexService, "x", 1); err == nil {
		t.Error("slice lookup by service with an int: want error")
	}
	if _, err := txn.get(TableServices, IndexID, "x"); err == nil {
		t.Error("exact service lookup without a name: want error")
	}
}

// TestServiceRevisionsAndChangeLog: Services and slices carry the revisions
// that created and last changed them, the tables theirs, and the change
// log hands both to the incremental compiler's feeder.
func TestServiceRevisionsAndChangeLog(t *testing.T) {
	s := mustStore(t)
	commit(t, s, func(txn *Txn) error { return UpsertService(txn, service("x", "web", "10.96.0.1")) })
	commit(t, s, func(txn *Txn) error { return UpsertEndpointSlice(txn, slice("x", "web-1", "web", "10.0.0.1")) })
	commit(t, s, func(txn *Txn) error {
		if err := UpsertService(txn, service("x", "web", "10.96.0.9")); err != nil {
			return err
		}
		return UpsertEndpointSlice(txn, slice("x", "web-1", "web", "10.0.0.1", "10.0.0.2"))
	})
	txn := s.ReadTxn()
	svc, _ := ServiceByName(txn, nil, "x", "web")
	sl, _ := EndpointSliceByName(txn, nil, "x", "web-1")
	if svc == nil || svc.CreateRevision != 1 || svc.ModifyRevision != 3 || svc.Object.Spec.ClusterIP != "10.96.0.9" {
		t.Errorf("service row %+v, want created at 1, modified at 3", svc)
	}
	if sl == nil || sl.CreateRevision != 2 || sl.ModifyRevision != 3 || len(sl.Object.Endpoints) != 2 {
		t.Errorf("slice row %+v, want created at 2, modified at 3", sl)
	}
	for table, want := range map[string]uint64{TableServices: 3, TableEndpointSlices: 3} {
		if got := Revision(txn, table); got != want {
			t.Errorf("revision of %s: %d, want %d", table, got, want)
		}
	}
	cs, err := ChangesSince(txn, 2)
	if err != nil {
		t.Fatal(err)
	}
	var sawSvc, sawSlice bool
	for _, c := range cs {
		switch c.Table {
		case TableServices:
			sawSvc = c.Before.(*Service).Object.Spec.ClusterIP == "10.96.0.1" && c.After.(*Service).Object.Spec.ClusterIP == "10.96.0.9"
		case TableEndpointSlices:
			sawSlice = len(c.Before.(*EndpointSlice).Object.Endpoints) == 1 && len(c.After.(*EndpointSlice).Object.Endpoints) == 2
		}
	}
	if !sawSvc || !sawSlice {
		t.Errorf("changes since 2 = %+v; want the service and the slice, before and after", cs)
	}
	commit(t, s, func(txn *Txn) error {
		if err := DeleteService(txn, "x", "web"); err != nil {
			return err
		}
		if err := DeleteService(txn, "x", "nope"); err != nil {
			return err
		}
		return DeleteEndpointSlice(txn, "x", "web-1")
	})
	txn = s.ReadTxn()
	if svcs, _ := Services(txn, nil); len(svcs) != 0 {
		t.Errorf("%d services after delete", len(svcs))
	}
	if sls, _ := EndpointSlices(txn, nil); len(sls) != 0 {
		t.Errorf("%d slices after delete", len(sls))
	}
}

// TestReplaceEndpointSlices: equal slices are not rewritten (no revision),
// changed ones are, missing ones go.
func TestReplaceEndpointSlices(t *testing.T) {
	s := mustStore(t)
	replace := func(slices ...*policyapi.EndpointSlice) bool {
		t.Helper()
		txn := s.WriteTxn()
		defer txn.Abort()
		changed, err := ReplaceEndpointSlices(txn, slices)
		if err != nil {
			t.Fatal(err)
		}
		txn.Commit()
		return changed
	}
	if !replace(slice("x", "a", "web", "10.0.0.1"), slice("x", "b", "web", "10.0.0.2")) {
		t.Fatal("first replace changed nothing")
	}
	rev := Revision(s.ReadTxn(), "")
	if replace(slice("x", "a", "web", "10.0.0.1"), slice("x", "b", "web", "10.0.0.2")) || Revision(s.ReadTxn(), "") != rev {
		t.Error("replacing slices with equal ones wrote")
	}
	if !replace(slice("x", "b", "web", "10.0.0.3")) {
		t.Fatal("a changed and a missing slice changed nothing")
	}
	got, _ := EndpointSlices(s.ReadTxn(), nil)
	if len(got) != 1 || got[0].Name != "b" || got[0].Endpoints[0].Addresses[0] != "10.0.0.3" {
		t.Errorf("after replace: %+v", got)
	}
}

// TestReplaceObjectsServices: ReplaceObjects follows Services like the
// other kinds, and leaves EndpointSlices to ReplaceEndpointSlices.
func TestReplaceObjectsServices(t *testing.T) {
	s := mustStore(t)
	commit(t, s, func(txn *Txn) error { return UpsertEndpointSlice(txn, slice("x", "web-1", "web")) })
	replace := func(objs Objects) bool {
		t.Helper()
		txn := s.WriteTxn()
		defer txn.Abort()
		changed, err := ReplaceObjects(txn, objs)
		if err != nil {
			t.Fatal(err)
		}
		txn.Commit()
		return changed
	}
	if !replace(Objects{Services: []*policyapi.Service{service("x", "web", "10.96.0.1"), service("x", "db", "10.96.0.2")}}) {
		t.Fatal("new services changed nothing")
	}
	if replace(Objects{Services: []*policyapi.Service{service("x", "web", "10.96.0.1"), service("x", "db", "10.96.0.2")}}) {
		t.Error("equal services were rewritten")
	}
	if !replace(Objects{Services: []*policyapi.Service{service("x", "web", "10.96.0.5")}}) {
		t.Fatal("an edit and a removal changed nothing")
	}
	txn := s.ReadTxn()
	svcs, _ := Services(txn, nil)
	if len(svcs) != 1 || svcs[0].Spec.ClusterIP != "10.96.0.5" {
		t.Errorf("services after replace: %+v", svcs)
	}
	if sls, _ := EndpointSlices(txn, nil); len(sls) != 1 {
		t.Errorf("ReplaceObjects touched the slices: %d left, want 1", len(sls))
	}
}
