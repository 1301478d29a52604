package endpointslice

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/store"
)

// TestControllerFollowsTheStore: a pod of the manifests becomes an
// endpoint once its CNI ADD commits (its endpoint Ready), with the address
// CNI gave it; a relabel and a DEL take it out again; a Service edit moves
// the slices. Each is a commit the controller follows on its own.
func TestControllerFollowsTheStore(t *testing.T) {
	st, err := store.New()
	if err != nil {
		t.Fatal(err)
	}
	write := func(fn func(*store.Txn) error) {
		t.Helper()
		if err := st.Update(fn); err != nil {
			t.Fatal(err)
		}
	}
	web := func(labels map[string]string) *policyapi.Pod {
		return &policyapi.Pod{ObjectMeta: policyapi.ObjectMeta{Namespace: "prod", Name: "web-1", Labels: labels},
			Spec: policyapi.PodSpec{Containers: []policyapi.Container{{Name: "c", Ports: []policyapi.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: policyapi.TCP}}}}}}
	}
	service := func(target string) *policyapi.Service {
		return &policyapi.Service{ObjectMeta: policyapi.ObjectMeta{Namespace: "prod", Name: "web"}, Spec: policyapi.ServiceSpec{
			ClusterIP: "10.96.0.10", Selector: map[string]string{"app": "web"},
			Ports: []policyapi.ServicePort{{Port: 80, Protocol: policyapi.TCP, TargetPort: policyapi.FromString(target)}}}}
	}
	att := store.Attachment{ContainerID: "c1", IfName: "eth0"}
	write(func(txn *store.Txn) error {
		if err := store.UpsertPod(txn, web(map[string]string{"app": "web"})); err != nil {
			return err
		}
		if err := store.UpsertService(txn, service("http")); err != nil {
			return err
		}
		// The ADD in flight: addresses reserved, not confirmed.
		return store.AttachEndpoint(txn, &store.Endpoint{Attachment: att, HostIfName: "lsweb", State: store.EndpointPending,
			Pod: store.PodRef{Namespace: "prod", Name: "web-1"}, Addresses: []store.AddressRef{{Pool: "v4", Addr: netip.MustParseAddr("10.244.0.7"), Bits: 24}}})
	})

	ctx, cancel := context.WithCancel(context.Background())
	c := New(st, nil)
	done := make(chan struct{})
	go func() { defer close(done); c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	// backends waits until the compiled Service has want as its backends.
	backends := func(what string, want ...string) {
		t.Helper()
		var got []policy.ServiceBackend
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			txn := st.ReadTxn()
			svcs, _ := store.Services(txn, nil)
			sls, _ := store.EndpointSlices(txn, nil)
			d, err := policy.Compile(&policy.Snapshot{Services: svcs, EndpointSlices: sls})
			if err != nil {
				t.Fatal(err)
			}
			got = nil
			for _, e := range d.Services {
				got = append(got, e.Backends...)
			}
			if len(got) == len(want) && (len(want) == 0 || netip.AddrPortFrom(got[0].Addr, got[0].Port).String() == want[0]) {
				return
			}
		}
		t.Fatalf("%s: backends %v, want %v", what, got, want)
	}
	backends("ADD in flight")
	write(func(txn *store.Txn) error {
		ep, err := store.EndpointByAttachment(txn, nil, att)
		if err != nil {
			return err
		}
		ready := ep.Copy()
		ready.State = store.EndpointReady
		return store.UpsertEndpoint(txn, ready)
	})
	backends("ADD confirmed", "10.244.0.7:8080")
	write(func(txn *store.Txn) error { return store.UpsertService(txn, service("nope")) })
	backends("targetPort names a port the pod does not declare")
	write(func(txn *store.Txn) error { return store.UpsertService(txn, service("http")) })
	backends("targetPort fixed", "10.244.0.7:8080")
	write(func(txn *store.Txn) error { return store.UpsertPod(txn, web(map[string]string{"app": "other"})) })
	backends("pod relabelled")
	write(func(txn *store.Txn) error { return store.UpsertPod(txn, web(map[string]string{"app": "web"})) })
	backends("pod labelled back", "10.244.0.7:8080")
	write(func(txn *store.Txn) error { _, err := store.ReleaseEndpoint(txn, att); return err })
	backends("CNI DEL")
}

// TestSyncTxnInTheManifestsTransaction: SyncTxn sees what its transaction
// wrote before it, so a Service and its slices commit together, and a
// second sync of the same state writes nothing.
func TestSyncTxnInTheManifestsTransaction(t *testing.T) {
	st, err := store.New()
	if err != nil {
		t.Fatal(err)
	}
	txn := st.WriteTxn()
	objs := store.Objects{
		Pods: []*policyapi.Pod{{ObjectMeta: policyapi.ObjectMeta{Namespace: "prod", Name: "remote", Labels: map[string]string{"app": "web"}},
			Status: policyapi.PodStatus{PodIPs: []policyapi.PodIP{{IP: "10.244.1.5"}}}}},
		Services: []*policyapi.Service{{ObjectMeta: policyapi.ObjectMeta{Namespace: "prod", Name: "web"},
			Spec: policyapi.ServiceSpec{ClusterIP: "10.96.0.10", Selector: map[string]string{"app": "web"}, Ports: []policyapi.ServicePort{{Port: 80}}}}},
	}
	if _, err := store.ReplaceObjects(txn, objs); err != nil {
		t.Fatal(err)
	}
	if changed, err := SyncTxn(txn); err != nil || !changed {
		t.Fatalf("SyncTxn = %v, %v; want a new slice", changed, err)
	}
	txn.Commit()
	read := st.ReadTxn()
	sls, _ := store.EndpointSlicesOfService(read, nil, "prod", "web")
	if len(sls) != 1 || sls[0].Object.Endpoints[0].Addresses[0] != "10.244.1.5" || sls[0].CreateRevision != 1 {
		t.Fatalf("slices after one commit: %+v", sls)
	}
	txn = st.WriteTxn()
	defer txn.Abort()
	if changed, err := SyncTxn(txn); err != nil || changed {
		t.Errorf("second SyncTxn of the same state = %v, %v; want no change", changed, err)
	}
}

// TestAffects: what can change a slice (a pod, a Service, an endpoint
// becoming Ready or a Ready one changing or going) is told apart from
// what cannot (an ADD's reserve, a cancelled ADD, a pool).
func TestAffects(t *testing.T) {
	ep := func(state store.EndpointState) *store.Endpoint {
		return &store.Endpoint{Attachment: store.Attachment{ContainerID: "c1", IfName: "eth0"}, State: state}
	}
	pending, ready, cancelled := ep(store.EndpointPending), ep(store.EndpointReady), ep(store.EndpointCancelled)
	for _, tc := range []struct {
		name    string
		changes []store.Change
		want    bool
	}{
		{"nothing", nil, false},
		{"reserve", []store.Change{{Table: store.TableEndpoints, After: pending}, {Table: store.TableAllocations, After: struct{}{}}}, false},
		{"DEL of an ADD in flight", []store.Change{{Table: store.TableEndpoints, Before: pending, After: cancelled}}, false},
		{"rolled-back ADD", []store.Change{{Table: store.TableEndpoints, Before: cancelled}}, false},
		{"pool", []store.Change{{Table: store.TablePools, After: struct{}{}}}, false},
		{"confirm", []store.Change{{Table: store.TableEndpoints, Before: pending, After: ready}}, true},
		{"repeated ADD of a Ready endpoint", []store.Change{{Table: store.TableEndpoints, Before: ready, After: pending}}, true},
		{"DEL", []store.Change{{Table: store.TableEndpoints, Before: ready}}, true},
		{"restored endpoint", []store.Change{{Table: store.TableEndpoints, After: ready}}, true},
		{"pod", []store.Change{{Table: store.TableEndpoints, After: pending}, {Table: store.TablePods, After: struct{}{}}}, true},
		{"Service", []store.Change{{Table: store.TableServices, Before: struct{}{}}}, true},
	} {
		if got := Affects(tc.changes); got != tc.want {
			t.Errorf("%s: Affects = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestSyncTxnWithoutServices: with no Service left (the case SyncTxn
// answers without reading a pod), the slices that were its are deleted.
func TestSyncTxnWithoutServices(t *testing.T) {
	st, err := store.New()
	if err != nil {
		t.Fatal(err)
	}
	err = st.Update(func(txn *store.Txn) error {
		return store.UpsertEndpointSlice(txn, &policyapi.EndpointSlice{ObjectMeta: policyapi.ObjectMeta{Namespace: "prod", Name: "web-ipv4",
			Labels: map[string]string{policyapi.ServiceNameLabel: "web"}}, AddressType: policyapi.AddressTypeIPv4})
	})
	if err != nil {
		t.Fatal(err)
	}
	txn := st.WriteTxn()
	defer txn.Abort()
	if changed, err := SyncTxn(txn); err != nil || !changed {
		t.Fatalf("SyncTxn = %v, %v; want the old slice deleted", changed, err)
	}
	if sls, _ := store.EndpointSlices(txn, nil); len(sls) != 0 {
		t.Errorf("slices left without a Service: %+v", sls)
	}
	if changed, err := SyncTxn(txn); err != nil || changed {
		t.Errorf("second SyncTxn = %v, %v; want no change", changed, err)
	}
}
