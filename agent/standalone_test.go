package agent

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/endpoints"
	"lockstep.dev/lockstep/agent/persist"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/store"
)

// TestStandaloneADDIsABackendWhenItAnswers: standalone, the agent is the
// endpoint-slice controller, and an ADD's confirm makes its pod a backend
// of the Services that select it in the same revision Enforce puts in
// force. No slice controller runs here: without the endpoint service's
// Derive the slices would stay empty (lockstep probe once connected
// through a Service before its last pod was a backend).
func TestStandaloneADDIsABackendWhenItAnswers(t *testing.T) {
	db, err := persist.Open(t.TempDir(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	st, err := store.NewDurable(db)
	if err != nil {
		t.Fatal(err)
	}
	err = st.Update(func(txn *store.Txn) error {
		if err := store.UpsertService(txn, &policyapi.Service{ObjectMeta: policyapi.ObjectMeta{Namespace: "x", Name: "web"}, Spec: policyapi.ServiceSpec{
			ClusterIP: "10.96.0.10", Selector: map[string]string{"app": "web"},
			Ports: []policyapi.ServicePort{{Port: 80, Protocol: policyapi.TCP, TargetPort: policyapi.FromInt(8080)}}}}); err != nil {
			return err
		}
		return store.UpsertPod(txn, &policyapi.Pod{ObjectMeta: policyapi.ObjectMeta{Namespace: "x", Name: "b", Labels: map[string]string{"app": "web"}}})
	})
	if err != nil {
		t.Fatal(err)
	}

	type seen struct {
		rev      uint64
		backends []string
	}
	var inForce []seen
	cfg := endpoints.Config{
		Pools: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/24")},
		Enforce: func(_ context.Context, _ string, rev uint64) error {
			txn := st.ReadTxn()
			sls, err := store.EndpointSlices(txn, nil)
			if err != nil {
				return err
			}
			s := seen{rev: store.Revision(txn, "")}
			for _, sl := range sls {
				for _, e := range sl.Endpoints {
					s.backends = append(s.backends, e.Addresses...)
				}
			}
			if s.rev != rev {
				t.Errorf("Enforce of revision %d while the store is at %d: the slices were written in a later transaction", rev, s.rev)
			}
			inForce = append(inForce, s)
			return nil
		},
	}
	(&standaloneMode{}).configureEndpoints(&cfg, nil)
	svc, err := endpoints.New(st, db, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a := api.Attachment{ContainerID: "c1", IfName: "eth0"}
	resp, err := svc.Add(ctx, api.AddRequest{Attachment: a, Netns: "/run/netns/x", Pod: api.PodRef{Namespace: "x", Name: "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Confirm(ctx, api.OpRequest{Attachment: a, OpID: resp.OpID}); err != nil {
		t.Fatal(err)
	}
	want := resp.Addresses[0].Address.Addr().String()
	if len(inForce) != 1 || len(inForce[0].backends) != 1 || inForce[0].backends[0] != want {
		t.Fatalf("backends in force when the ADD answers: %+v, want [%s]", inForce, want)
	}
	if _, err := svc.Del(ctx, a); err != nil {
		t.Fatal(err)
	}
	sls, err := store.EndpointSlices(st.ReadTxn(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, sl := range sls {
		if len(sl.Endpoints) != 0 {
			t.Fatalf("after DEL the slice %s/%s still has %+v", sl.Namespace, sl.Name, sl.Endpoints)
		}
	}
}
