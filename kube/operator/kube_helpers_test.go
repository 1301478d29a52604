package operator

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	apierrors "lockstep.dev/lockstep/kube/api/errors"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/types"
	"lockstep.dev/lockstep/kube/api/watch"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
	"lockstep.dev/lockstep/kube/client"
	"lockstep.dev/lockstep/test/kubetest"
)

// cluster is a real etcd and kube-apiserver with lockstep's CRDs.
type cluster struct {
	t    *testing.T
	env  *kubetest.Env
	rest *client.Config
	c    *clients
}

// startCluster starts a kubetest Env (or skips; see kubetest.Start) and
// installs deploy/crds.
func startCluster(t *testing.T) *cluster {
	env := kubetest.Start(t)
	cfg, err := client.LoadConfig(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 500, 1000
	ctx := t.Context()
	// The CRDs, and the RBAC the operator is deployed with: replicas act
	// as its ServiceAccount, so a request deploy/rbac.yaml does not allow
	// fails the test.
	for _, f := range []string{"../../deploy/crds", "../../deploy/rbac.yaml"} {
		if _, err := env.Kubectl(ctx, nil, "apply", "-f", f); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := env.Kubectl(ctx, nil, "wait", "--for", "condition=established", "--timeout=60s",
		"crd/ippools.lockstep.dev", "crd/nodeipams.lockstep.dev"); err != nil {
		t.Fatal(err)
	}
	c, err := newClients(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cl := &cluster{t: t, env: env, rest: cfg, c: c}
	// The CRDs are established, but discovery may lag a moment behind.
	cl.eventually(30*time.Second, "the nodeipams resource is served", func() (bool, string) {
		_, err := c.lockstep.NodeIPAMs().List(ctx, metav1.ListOptions{})
		return err == nil, fmt.Sprint(err)
	})
	return cl
}

// eventually polls cond until it holds, failing the test after timeout
// with cond's last explanation.
func (cl *cluster) eventually(timeout time.Duration, what string, cond func() (bool, string)) {
	cl.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			cl.t.Fatalf("after %s, still not true that %s: %s", timeout, what, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (cl *cluster) createPool(name string, size int32, cidrs ...v1alpha1.CIDR) {
	cl.t.Helper()
	p := pool(name, size, cidrs...)
	p.Generation = 0
	if _, err := cl.c.lockstep.IPPools().Create(cl.t.Context(), p, metav1.CreateOptions{}); err != nil {
		cl.t.Fatal(err)
	}
}

func (cl *cluster) getPool(name string) *v1alpha1.IPPool {
	cl.t.Helper()
	p, err := cl.c.lockstep.IPPools().Get(cl.t.Context(), name, metav1.GetOptions{})
	if err != nil {
		cl.t.Fatal(err)
	}
	return p
}

// createNode creates a Node and returns its UID.
func (cl *cluster) createNode(name string) types.UID {
	cl.t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	out := new(corev1.Node)
	if err := cl.c.core.Post().Resource("nodes").Body(n).Do(cl.t.Context()).Into(out); err != nil {
		cl.t.Fatalf("create node %s: %v", name, err)
	}
	return out.UID
}

func (cl *cluster) deleteNode(name string) {
	cl.t.Helper()
	if err := cl.c.core.Delete().Resource("nodes").Name(name).Do(cl.t.Context()).Error(); err != nil {
		cl.t.Fatalf("delete node %s: %v", name, err)
	}
}

// nodeIPAM reads a NodeIPAM, nil if there is none.
func (cl *cluster) nodeIPAM(name string) *v1alpha1.NodeIPAM {
	cl.t.Helper()
	n, err := cl.c.lockstep.NodeIPAMs().Get(cl.t.Context(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		cl.t.Fatal(err)
	}
	return n
}

// operatorREST is the API server as the operator's ServiceAccount sees
// it, under deploy/rbac.yaml.
func (cl *cluster) operatorREST() *client.Config {
	cfg := client.CopyConfig(cl.rest)
	cfg.Impersonate = client.Impersonation{
		UserName: "system:serviceaccount:kube-system:lockstep-operator",
		Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"},
	}
	return cfg
}

// replica is one operator process of a test.
type replica struct {
	name      string
	identity  string
	writes    atomic.Int64 // non-GET requests other than to the Lease
	conflicts atomic.Int64 // 409 answers
	cancel    context.CancelFunc
	done      chan error
	stopOnce  sync.Once
	logs      *lockedBuffer
	// opsAddr is where the replica serves /healthz, /readyz and /metrics.
	opsAddr atomic.Pointer[string]
}

// opts tune a replica for a test.
type opts struct {
	leaderElect bool
	minFree     int
	delay       time.Duration
}

// startReplica runs an operator until the test ends or stop is called.
// Lease timings are short, so takeovers happen in seconds.
func (cl *cluster) startReplica(name string, o opts) *replica {
	r := &replica{name: name, identity: name + "-" + newPendingID()[:6], done: make(chan error, 1), logs: &lockedBuffer{}}
	cfg := cl.operatorREST()
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.Method != http.MethodGet && !strings.Contains(req.URL.Path, "/leases") {
				r.writes.Add(1)
			}
			resp, err := rt.RoundTrip(req)
			if resp != nil && resp.StatusCode == http.StatusConflict {
				r.conflicts.Add(1)
			}
			return resp, err
		})
	})
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	log := slog.New(slog.NewTextHandler(io.MultiWriter(r.logs, testWriter{cl.t, name}), &slog.HandlerOptions{Level: slog.LevelInfo}))
	go func() {
		r.done <- Run(ctx, Config{
			REST:               cfg,
			MinFree:            o.minFree,
			ExcessReleaseDelay: o.delay,
			LeaderElect:        o.leaderElect,
			Identity:           r.identity,
			LeaseDuration:      2 * time.Second,
			RenewDeadline:      1500 * time.Millisecond,
			RetryPeriod:        250 * time.Millisecond,
			Resync:             2 * time.Second,
			Logger:             log,
			MetricsAddr:        "127.0.0.1:0",
			listening:          func(addr string) { r.opsAddr.Store(&addr) },
		})
	}()
	cl.t.Cleanup(func() { r.stop(cl.t) })
	return r
}

// get fetches path from the replica's ops endpoint.
func (r *replica) get(t *testing.T, path string) (int, string) {
	t.Helper()
	addr := r.opsAddr.Load()
	for deadline := time.Now().Add(10 * time.Second); addr == nil && time.Now().Before(deadline); addr = r.opsAddr.Load() {
		time.Sleep(10 * time.Millisecond)
	}
	if addr == nil {
		t.Fatalf("replica %s did not open its ops endpoint", r.name)
	}
	return httpGet(t, *addr, path)
}

// stop cancels the replica and waits for Run to return.
func (r *replica) stop(t *testing.T) {
	r.stopOnce.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("replica %s: %v", r.name, err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("replica %s did not stop within 30s of its context ending", r.name)
		}
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// testWriter sends log lines to t.Log until the test ends.
type testWriter struct {
	t      *testing.T
	prefix string
}

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(w.prefix + ": " + strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// overlapWatch follows every NodeIPAM version with a raw watch (an
// informer may skip versions when it relists) and records each moment two
// NodeIPAMs held overlapping blocks, and each block that left a spec
// without the release handshake: the version just before did not satisfy
// MayRelease, or the new one lacks the released mark. If the watch ever
// has to list again (a gap), pairs across the gap are not judged, and the
// gap is logged.
type overlapWatch struct {
	mu         sync.Mutex
	violations []string
	assigned   int // blocks seen added
	released   int // blocks seen released
	gaps       int
}

func (cl *cluster) watchInvariants() *overlapWatch {
	w := &overlapWatch{}
	ipams := cl.c.lockstep.NodeIPAMs()
	state := map[string]*v1alpha1.NodeIPAM{}
	list := func(ctx context.Context) (string, error) {
		l, err := ipams.List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", err
		}
		clear(state)
		for i := range l.Items {
			state[l.Items[i].Name] = &l.Items[i]
		}
		return l.ResourceVersion, nil
	}
	rv, err := list(cl.t.Context())
	if err != nil {
		cl.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			wi, err := ipams.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			gap := false
			for ev := range wi.ResultChan() {
				if ev.Type == watch.Error {
					gap = true // the version is too old: list again
					break
				}
				n, ok := ev.Object.(*v1alpha1.NodeIPAM)
				if !ok {
					continue
				}
				rv = n.ResourceVersion
				w.mu.Lock()
				switch ev.Type {
				case watch.Added, watch.Modified:
					w.observe(state[n.Name], n)
					state[n.Name] = n
					w.overlaps(state)
				case watch.Deleted:
					delete(state, n.Name)
				}
				w.mu.Unlock()
			}
			wi.Stop()
			if gap && ctx.Err() == nil {
				w.mu.Lock()
				w.gaps++
				if r, err := list(ctx); err == nil {
					rv = r
				}
				w.mu.Unlock()
			}
			// Otherwise the watch ended on its own: resuming from rv
			// loses nothing.
		}
	}()
	cl.t.Cleanup(func() {
		cancel()
		<-done
		if w.gaps > 0 {
			cl.t.Logf("the invariant watch had %d gaps", w.gaps)
		}
	})
	return w
}

// observe judges one step from old to n (old nil: created, or after a
// gap).
func (w *overlapWatch) observe(old, n *v1alpha1.NodeIPAM) {
	if old == nil || old.UID != n.UID {
		w.assigned += len(n.Spec.Blocks)
		return
	}
	for _, b := range n.Spec.Blocks {
		if old.Spec.Block(b.CIDR) == nil {
			w.assigned++
		}
	}
	for _, b := range old.Spec.Blocks {
		if n.Spec.Block(b.CIDR) != nil {
			continue
		}
		w.released++
		if !old.MayRelease(b.CIDR) {
			w.violations = append(w.violations, fmt.Sprintf("%s left nodeipam %s at generation %d, but generation %d (observed %d) had no current ready-for-release answer for it",
				b.CIDR, n.Name, n.Generation, old.Generation, old.Status.ObservedGeneration))
		}
		if m := n.Spec.Mark(b.CIDR); m == nil || m.State != v1alpha1.Released {
			w.violations = append(w.violations, fmt.Sprintf("%s left nodeipam %s without a released mark", b.CIDR, n.Name))
		}
	}
}

// overlaps records any two NodeIPAMs holding overlapping blocks.
func (w *overlapWatch) overlaps(state map[string]*v1alpha1.NodeIPAM) {
	held := map[netip.Prefix]string{}
	for _, n := range state {
		for _, b := range n.Spec.Blocks {
			p, _ := b.CIDR.Prefix()
			for q, other := range held {
				if q.Overlaps(p) {
					w.violations = append(w.violations, fmt.Sprintf("%s held by %s and %s (uid %s)", p, other, n.Name, n.UID))
				}
			}
			held[p] = n.Name + "/" + string(n.UID)
		}
	}
}

func (w *overlapWatch) check(t *testing.T) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, v := range w.violations {
		t.Error(v)
	}
}

// report writes an agent's status for NodeIPAM name, as its agent would:
// read, modify, UpdateStatus with the resourceVersion read, and on a
// conflict read again. It returns the stored object.
func (cl *cluster) report(name string, edit func(n *v1alpha1.NodeIPAM)) *v1alpha1.NodeIPAM {
	cl.t.Helper()
	for {
		n := cl.nodeIPAM(name)
		if n == nil {
			cl.t.Fatalf("report status of nodeipam %s: it does not exist", name)
		}
		edit(n)
		now := metav1.Now()
		n.Status.LastReportTime = &now
		out, err := cl.c.lockstep.NodeIPAMs().UpdateStatus(cl.t.Context(), n, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			cl.t.Fatal(err)
		}
		return out
	}
}

// usage sets the agent's usage report: cidr -> allocated.
func usage(n *v1alpha1.NodeIPAM, alloc map[v1alpha1.CIDR]int32) {
	n.Status.Blocks = nil
	for _, b := range n.Spec.Blocks {
		n.Status.Blocks = append(n.Status.Blocks, v1alpha1.BlockUsage{CIDR: b.CIDR, Allocated: alloc[b.CIDR]})
	}
}

func blockNames(n *v1alpha1.NodeIPAM) []string {
	if n == nil {
		return nil
	}
	var out []string
	for _, b := range n.Spec.Blocks {
		out = append(out, string(b.CIDR))
	}
	return out
}
