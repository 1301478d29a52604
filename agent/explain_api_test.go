package agent

import (
	"context"
	"log/slog"
	"path/filepath"
	"testing"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/explain"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/server"
	"lockstep.dev/lockstep/agent/store"
)

// TestExplainOverTheSocket: `lockstep explain` on a node asks the agent
// through its socket, and the agent judges the store's committed state:
// a policy committed after the first question changes the second answer.
// An unknown pod is a clear error, and an agent still starting says so.
func TestExplainOverTheSocket(t *testing.T) {
	st, err := store.New()
	if err != nil {
		t.Fatal(err)
	}
	gate := newAPIGate()
	sock := filepath.Join(t.TempDir(), "lockstep.sock")
	lis, err := server.ListenSocket(sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := server.NewAPIServer(gate, slog.New(slog.DiscardHandler), server.NewMetrics(gate.Status))
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	c := api.NewClient(sock, 0)
	defer c.Close()
	ctx := context.Background()
	q := api.ExplainRequest{From: "x/a", To: "x/b", Port: "80"}

	var res explain.Result
	if err := c.Explain(ctx, q, &res); api.CodeOf(err) != api.CodeTryAgainLater {
		t.Fatalf("explain before start-up: %v, want code %d", err, api.CodeTryAgainLater)
	}
	gate.open(&agentAPI{st: st})
	if err := st.Update(func(txn *store.Txn) error {
		for _, name := range []string{"a", "b"} {
			p := &policyapi.Pod{ObjectMeta: policyapi.ObjectMeta{Namespace: "x", Name: name, Labels: map[string]string{"pod": name}}}
			if err := store.UpsertPod(txn, p); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Explain(ctx, q, &res); err != nil || res.Verdict != explain.Allow {
		t.Fatalf("explain without policies: %+v, %v; want allow", res, err)
	}
	if err := st.Update(func(txn *store.Txn) error {
		return store.UpsertPolicy(txn, &policyapi.NetworkPolicy{ObjectMeta: policyapi.ObjectMeta{Namespace: "x", Name: "deny"}})
	}); err != nil {
		t.Fatal(err)
	}
	res = explain.Result{}
	if err := c.Explain(ctx, q, &res); err != nil || res.Verdict != explain.Deny || res.Ingress.Policies[0] != "x/deny" {
		t.Fatalf("explain after x/deny: %+v, %v; want deny by x/deny", res, err)
	}
	q.To = "x/nobody"
	if err := c.Explain(ctx, q, &res); api.CodeOf(err) != api.CodeInvalidConfig {
		t.Fatalf("explain of an unknown pod: %v, want code %d", err, api.CodeInvalidConfig)
	}
}
