package agent

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/enforcer"
	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/server"
	"lockstep.dev/lockstep/agent/store"
)

// get fetches path from the ops endpoint at addr.
func get(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestReadyzFollowsStartUp walks the ops endpoint through the agent's
// start-up: /readyz says what the agent waits for until it serves ADDs, and
// fails again once it shuts down; /healthz passes throughout, since none of
// that is the process being stuck.
func TestReadyzFollowsStartUp(t *testing.T) {
	gate := newAPIGate()
	cfg := Config{MetricsAddr: "127.0.0.1:0"}
	o, err := startOps(cfg, gate, server.NewMetrics(gate.Status), make(chan error, 1), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer o.close()
	o.loop("enforcer") // a loop that has just started is alive
	// Metrics answer from the start too (the pools only once the gate
	// opens).
	if code, body := get(t, o.srv.Addr(), "/metrics"); code != 200 || !strings.Contains(body, "process_start_time_seconds") {
		t.Errorf("/metrics while starting = %d %q", code, body)
	}

	steps := []struct {
		name      string
		do        func()
		wantReady int
		wantBody  string // substring of /readyz
	}{
		{"starting", func() {}, 503, "[-]start-up failed: waiting for start-up"},
		{"waiting for the API server", func() {
			gate.setWaiting("the API server at https://10.0.0.1:6443 to list pods, namespaces, network policies and nodes")
		}, 503, "waiting for the API server at https://10.0.0.1:6443"},
		{"waiting for blocks", func() {
			gate.setWaiting("the NodeIPAM of node a to assign it address blocks")
		}, 503, "waiting for the NodeIPAM of node a"},
		{"gate open, socket not yet", func() { gate.open(&agentAPI{}) }, 503, "finishing start-up"},
		{"ready", o.setReady, 200, "ok"},
		{"shutting down", o.shuttingDown, 503, "shutting down"},
	}
	for _, s := range steps {
		s.do()
		code, body := get(t, o.srv.Addr(), "/readyz")
		if code != s.wantReady || !strings.Contains(body, s.wantBody) {
			t.Errorf("%s: /readyz = %d %q, want %d containing %q", s.name, code, body, s.wantReady, s.wantBody)
		}
		if code, body := get(t, o.srv.Addr(), "/healthz"); code != 200 || body != "ok" {
			t.Errorf("%s: /healthz = %d %q, want 200 ok", s.name, code, body)
		}
	}
}

// TestHealthzNamesAStalledLoop: a loop that stops beating fails /healthz,
// which names it, and /readyz; one beat heals both.
func TestHealthzNamesAStalledLoop(t *testing.T) {
	gate := newAPIGate()
	o, err := startOps(Config{MetricsAddr: "127.0.0.1:0"}, gate, server.NewMetrics(gate.Status), make(chan error, 1), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer o.close()
	o.loop("routes")
	stuck := o.watchdog.Register("enforcer", 50*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	code, body := get(t, o.srv.Addr(), "/healthz")
	if code != 503 || !strings.Contains(body, "[-]loops failed: loop enforcer last turned") || strings.Contains(body, "routes") {
		t.Errorf("/healthz with the enforcer silent = %d %q, want 503 naming the enforcer alone", code, body)
	}
	o.setReady()
	if code, body := get(t, o.srv.Addr(), "/readyz"); code != 503 || !strings.Contains(body, "loop enforcer") {
		t.Errorf("/readyz of a started agent with the enforcer silent = %d %q, want 503: not alive is not ready", code, body)
	}
	stuck.Beat()
	if code, body := get(t, o.srv.Addr(), "/readyz"); code != 200 {
		t.Errorf("/readyz after a beat = %d %q, want 200", code, body)
	}
	if code, body := get(t, o.srv.Addr(), "/healthz"); code != 200 {
		t.Errorf("/healthz after a beat = %d %q, want 200", code, body)
	}
}

// addrRecorder is a slog handler that keeps the address the agent logs it
// serves its probes on.
type addrRecorder struct {
	mu   sync.Mutex
	addr string
}

func (r *addrRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *addrRecorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *addrRecorder) WithGroup(string) slog.Handler            { return r }
func (r *addrRecorder) Handle(_ context.Context, rec slog.Record) error {
	if strings.Contains(rec.Message, "/healthz") {
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "addr" {
				r.mu.Lock()
				r.addr = a.Value.String()
				r.mu.Unlock()
			}
			return true
		})
	}
	return nil
}

func (r *addrRecorder) get() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.addr
}

// nopDataplane accepts every state.
type nopDataplane struct{}

func (nopDataplane) Attach(string) error         { return nil }
func (nopDataplane) Detach(string) error         { return nil }
func (nopDataplane) Apply(*policy.Desired) error { return nil }

// TestReadyzAndMetricsNameAPolicyThatFailsClosed: a policy lockstep
// cannot enforce leaves the agent serving; /readyz fails naming it,
// /metrics counts it, and both recover once it is deleted.
func TestReadyzAndMetricsNameAPolicyThatFailsClosed(t *testing.T) {
	gate := newAPIGate()
	o, err := startOps(Config{MetricsAddr: "127.0.0.1:0"}, gate, server.NewMetrics(gate.Status), make(chan error, 1), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer o.close()
	st, err := store.New()
	if err != nil {
		t.Fatal(err)
	}
	enf := enforcer.New(st, nopDataplane{}, slog.New(slog.DiscardHandler))
	o.enforcer.Store(enf)
	gate.open(&agentAPI{})
	o.setReady()
	write := func(fn func(*store.Txn) error) { t.Helper(); commitAndSync(t, st, enf, fn) }
	write(func(txn *store.Txn) error {
		return store.UpsertPolicy(txn, &policyapi.NetworkPolicy{ObjectMeta: policyapi.ObjectMeta{Namespace: "team", Name: "bad"},
			Spec: policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{{From: []policyapi.NetworkPolicyPeer{{IPBlock: &policyapi.IPBlock{CIDR: "10.0.0.0/40"}}}}}}})
	})
	// A tenant's policy that fails closed is enforced, closed: the agent
	// stays ready, and the failure shows in the metrics.
	if code, body := get(t, o.srv.Addr(), "/readyz"); code != 200 {
		t.Errorf("/readyz with a policy failing closed = %d %q, want 200", code, body)
	}
	var buf strings.Builder
	writePolicyFailures(&buf, enf.Failures())
	for _, want := range []string{"lockstep_policy_failures 1", `lockstep_policy_failed{policy="team/bad"} 1`} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("metrics lack %q:\n%s", want, buf.String())
		}
	}
	write(func(txn *store.Txn) error { return store.DeletePolicy(txn, "team", "bad") })
	if code, body := get(t, o.srv.Addr(), "/readyz"); code != 200 {
		t.Errorf("/readyz after deleting the policy = %d %q", code, body)
	}
	buf.Reset()
	writePolicyFailures(&buf, enf.Failures())
	if !strings.Contains(buf.String(), "lockstep_policy_failures 0") {
		t.Errorf("metrics after deleting the policy:\n%s", buf.String())
	}
}

// commitAndSync commits fn to st and waits until enf has applied it.
func commitAndSync(t *testing.T, st *store.Store, enf *enforcer.Enforcer, fn func(*store.Txn) error) {
	t.Helper()
	if err := st.Update(fn); err != nil {
		t.Fatal(err)
	}
	if err := enf.Sync(context.Background()); err != nil {
		t.Fatalf("sync: %v", err)
	}
}

// TestMetricsNameServicesOverCapacity: a namespace whose Services the
// node's Service maps cannot hold is left to kube-proxy while the apply
// goes through; the enforcer's failures, its log and /metrics name it,
// and it is translated again once it fits.
func TestMetricsNameServicesOverCapacity(t *testing.T) {
	st, err := store.New()
	if err != nil {
		t.Fatal(err)
	}
	var logged strings.Builder
	enf := enforcer.New(st, nopDataplane{}, slog.New(slog.NewTextHandler(&logged, nil)))
	limits := policy.DefaultLimits
	limits.ServiceFrontends = 3
	enf.SetLimits(limits)
	service := func(ns string, ports int) *policyapi.Service {
		s := &policyapi.Service{ObjectMeta: policyapi.ObjectMeta{Namespace: ns, Name: "svc"}, Spec: policyapi.ServiceSpec{ClusterIP: "10.96.0.1" + strconv.Itoa(ports)}}
		for i := range ports {
			s.Spec.Ports = append(s.Spec.Ports, policyapi.ServicePort{Name: "p" + strconv.Itoa(i), Port: int32(80 + i), Protocol: "TCP"})
		}
		return s
	}
	write := func(fn func(*store.Txn) error) { t.Helper(); commitAndSync(t, st, enf, fn) }
	metrics := func() string {
		var buf strings.Builder
		writeServicesOverCapacity(&buf, enf.Failures())
		return buf.String()
	}
	write(func(txn *store.Txn) error {
		if err := store.UpsertService(txn, service("tenant", 1)); err != nil {
			return err
		}
		return store.UpsertService(txn, service("hog", 3))
	})
	if f := enf.Failures(); len(f.Services) != 1 || !strings.Contains(f.Services["hog"], "namespace hog's for 3 frontends") {
		t.Errorf("failures name %v, want namespace hog", f.Services)
	}
	for _, want := range []string{"lockstep_service_namespaces_over_capacity 1", `lockstep_service_namespace_over_capacity{namespace="hog"} 1`} {
		if !strings.Contains(metrics(), want) {
			t.Errorf("metrics lack %q:\n%s", want, metrics())
		}
	}
	// Another Service in the namespace changes its counts, not its state:
	// no second warning.
	write(func(txn *store.Txn) error {
		s := service("hog", 1)
		s.Name, s.Spec.ClusterIP = "other", "10.96.0.99"
		return store.UpsertService(txn, s)
	})
	if n := strings.Count(logged.String(), "services not translated"); n != 1 || !strings.Contains(logged.String(), "namespace=hog") {
		t.Errorf("%d warnings, want one naming the namespace, in the log:\n%s", n, logged.String())
	}
	write(func(txn *store.Txn) error { return store.DeleteService(txn, "hog", "other") })
	if n := enf.Services().Frontends; n != 1 {
		t.Errorf("%d frontends applied, want the tenant's one", n)
	}
	write(func(txn *store.Txn) error { return store.UpsertService(txn, service("hog", 2)) })
	if f := enf.Failures(); len(f.Services) != 0 || !f.Empty() {
		t.Errorf("failures %+v once the namespace fits", f)
	}
	if !strings.Contains(logged.String(), "services translated by lockstep again") {
		t.Errorf("no note in the log that the namespace came back:\n%s", logged.String())
	}
	if !strings.Contains(metrics(), "lockstep_service_namespaces_over_capacity 0") {
		t.Errorf("metrics once the namespace fits:\n%s", metrics())
	}
	if n := enf.Services().Frontends; n != 3 {
		t.Errorf("%d frontends applied, want 3", n)
	}
}
