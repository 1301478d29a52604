package nodeipam

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	apierrors "lockstep.dev/lockstep/kube/api/errors"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/runtime"
	"lockstep.dev/lockstep/kube/api/types"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
	"lockstep.dev/lockstep/kube/client"
	"lockstep.dev/lockstep/test/kubetest"
)

// cluster is a real kube-apiserver with lockstep's CRDs, and the clients
// a test uses to play the operator, the kubelet and the garbage collector
// (none of which runs: objects change only when the test changes them).
type cluster struct {
	env   *kubetest.Env
	cfg   *client.Config
	ipams *client.Resource[*v1alpha1.NodeIPAM, *v1alpha1.NodeIPAMList]
	core  client.Interface
}

func startCluster(t *testing.T) *cluster {
	t.Helper()
	env := kubetest.Start(t)
	cfg := &client.Config{
		Host: env.Host, BearerToken: env.Token,
		CAFile: env.CAFile,
		// Tests poll; the default client-side limit (5/s) would make
		// them wait on the client, not on the server.
		QPS: 200, Burst: 400,
	}
	ctx := t.Context()
	if _, err := env.Kubectl(ctx, nil, "apply", "-f", "../../deploy/crds"); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Kubectl(ctx, nil, "wait", "--for=condition=Established", "--timeout=60s",
		"crd/nodeipams.lockstep.dev", "crd/ippools.lockstep.dev"); err != nil {
		t.Fatal(err)
	}
	lc, err := client.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	core, err := client.ForGroup(cfg, corev1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	c := &cluster{env: env, cfg: cfg, ipams: lc.NodeIPAMs(), core: core}
	c.create(t, "namespaces", "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "web"}})
	return c
}

// create POSTs obj to resource in namespace ns ("" for cluster scope).
func (c *cluster) create(t *testing.T, resource, ns string, obj runtime.Object) {
	t.Helper()
	req := c.core.Post().Resource(resource).Body(obj)
	if ns != "" {
		req = req.Namespace(ns)
	}
	if err := req.Do(t.Context()).Error(); err != nil {
		t.Fatalf("create %s: %v", resource, err)
	}
}

// createNode registers a Node called name, as a kubelet does, and returns
// its UID.
func (c *cluster) createNode(t *testing.T, name string) types.UID {
	t.Helper()
	out := &corev1.Node{}
	err := c.core.Post().Resource("nodes").Body(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}).Do(t.Context()).Into(out)
	if err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
	return out.UID
}

// deleteNode deletes the Node called name. No garbage collector runs: its
// NodeIPAM stays until the test (playing the operator) deletes it.
func (c *cluster) deleteNode(t *testing.T, name string) {
	t.Helper()
	if err := c.core.Delete().Resource("nodes").Name(name).Do(t.Context()).Error(); err != nil {
		t.Fatalf("delete node %s: %v", name, err)
	}
}

// createPod creates a pod bound to node, Pending with no status, as the
// scheduler leaves it for the kubelet.
func (c *cluster) createPod(t *testing.T, name, node string) pod {
	t.Helper()
	in := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "web"},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "web", Image: "registry.invalid/web:1"}}},
	}
	out := &corev1.Pod{}
	if err := c.core.Post().Namespace("web").Resource("pods").Body(in).Do(t.Context()).Into(out); err != nil {
		t.Fatalf("create pod %s: %v", name, err)
	}
	return pod{namespace: "web", name: name, uid: string(out.UID)}
}

// podRunning writes p's status as the kubelet does once its sandbox is
// wired: Running, with its address.
func (c *cluster) podRunning(t *testing.T, p pod, ip netip.Addr) {
	t.Helper()
	cur := &corev1.Pod{}
	if err := c.core.Get().Namespace("web").Resource("pods").Name(p.name).Do(t.Context()).Into(cur); err != nil {
		t.Fatal(err)
	}
	if string(cur.UID) != p.uid {
		t.Fatalf("pod %s has uid %s, want %s", p, cur.UID, p.uid)
	}
	cur.Status.Phase = corev1.PodRunning
	cur.Status.PodIP = ip.String()
	cur.Status.PodIPs = []corev1.PodIP{{IP: ip.String()}}
	if err := c.core.Put().Namespace("web").Resource("pods").Name(p.name).SubResource("status").Body(cur).Do(t.Context()).Error(); err != nil {
		t.Fatalf("write status of pod %s: %v", p, err)
	}
}

// deletePod removes p at once, as the pod garbage collector does for pods
// of a node that is gone: no kubelet confirms, no CNI DEL follows.
func (c *cluster) deletePod(t *testing.T, p pod) {
	t.Helper()
	zero := int64(0)
	opts := &metav1.DeleteOptions{GracePeriodSeconds: &zero, Preconditions: metav1.NewUIDPreconditions(p.uid)}
	if err := c.core.Delete().Namespace("web").Resource("pods").Name(p.name).Body(opts).Do(t.Context()).Error(); err != nil {
		t.Fatalf("delete pod %s: %v", p, err)
	}
}

// livePods returns the UIDs of the pods that exist.
func (c *cluster) livePods(t *testing.T) map[string]bool {
	t.Helper()
	list := &corev1.PodList{}
	if err := c.core.Get().Namespace("web").Resource("pods").Do(t.Context()).Into(list); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, p := range list.Items {
		out[string(p.UID)] = true
	}
	return out
}

// createNodeIPAM creates, as the operator does, node's NodeIPAM owned by
// the Node with nodeUID and assigning blocks.
func (c *cluster) createNodeIPAM(t *testing.T, node string, nodeUID types.UID, blocks ...string) *v1alpha1.NodeIPAM {
	t.Helper()
	n := v1alpha1.NewNodeIPAM(node, nodeUID)
	for _, b := range blocks {
		n.Spec.Blocks = append(n.Spec.Blocks, v1alpha1.Block{CIDR: v1alpha1.CIDR(b), Pool: "default"})
	}
	out, err := c.ipams.Create(t.Context(), n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// nodeIPAM reads node's NodeIPAM from the API server.
func (c *cluster) nodeIPAM(t *testing.T, node string) *v1alpha1.NodeIPAM {
	t.Helper()
	n, err := c.ipams.Get(t.Context(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// operate changes node's NodeIPAM spec as the operator does: read, change,
// update on the resourceVersion read, again on a conflict.
func (c *cluster) operate(t *testing.T, node string, change func(*v1alpha1.NodeIPAM)) *v1alpha1.NodeIPAM {
	t.Helper()
	for {
		n := c.nodeIPAM(t, node)
		change(n)
		out, err := c.ipams.Update(t.Context(), n, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
}

// mark marks cidr for release.
func (c *cluster) mark(t *testing.T, node, cidr string) *v1alpha1.NodeIPAM {
	t.Helper()
	return c.operate(t, node, func(n *v1alpha1.NodeIPAM) {
		n.Spec.Releases = append(n.Spec.Releases, v1alpha1.ReleaseMark{CIDR: v1alpha1.CIDR(cidr), State: v1alpha1.MarkedForRelease, Since: metav1.Now()})
	})
}

// release takes cidr back in one update, if and only if the agent's answer
// allows it (NodeIPAM.MayRelease): the only test the operator may use.
func (c *cluster) release(t *testing.T, node, cidr string) bool {
	t.Helper()
	released := false
	c.operate(t, node, func(n *v1alpha1.NodeIPAM) {
		released = n.MayRelease(v1alpha1.CIDR(cidr))
		if !released {
			return
		}
		n.Spec.Blocks = slicesDelete(n.Spec.Blocks, func(b v1alpha1.Block) bool { return string(b.CIDR) == cidr })
		n.Spec.Mark(v1alpha1.CIDR(cidr)).State = v1alpha1.Released
	})
	return released
}

func slicesDelete[T any](s []T, del func(T) bool) []T {
	out := s[:0]
	for _, v := range s {
		if !del(v) {
			out = append(out, v)
		}
	}
	return out
}

// answered waits until the agent has answered the spec as it is now
// (observedGeneration equals generation), and returns that object.
func (c *cluster) answered(t *testing.T, node string) *v1alpha1.NodeIPAM {
	t.Helper()
	var n *v1alpha1.NodeIPAM
	eventually(t, "the agent answers NodeIPAM "+node, func() (bool, string) {
		n = c.nodeIPAM(t, node)
		return n.StatusCurrent(), fmt.Sprintf("generation %d, observed %d", n.Generation, n.Status.ObservedGeneration)
	})
	return n
}

// eventually polls cond until it holds. The bound only keeps a broken
// agent from hanging the run; no assertion depends on how long it took.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: never happened; last seen: %s", what, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// agent is a node's agent running in process: the agent side (node) and
// its Syncer on the cluster.
type agent struct {
	*node
	syncer *Syncer
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// startAgent starts the agent of node on the state directory dir, with
// hooks h, and returns once it runs (not once it is ready).
func (c *cluster) startAgent(t *testing.T, dir, nodeName string, h hooks, tune func(*Options)) *agent {
	t.Helper()
	a := c.newAgent(t, dir, nodeName, h, tune)
	a.run(t)
	return a
}

// newAgent is startAgent without starting the Syncer: the agent as it is
// after New, before it has read anything from the API server.
func (c *cluster) newAgent(t *testing.T, dir, nodeName string, h hooks, tune func(*Options)) *agent {
	t.Helper()
	n := openNode(t, dir)
	opts := Options{
		Config: c.cfg, NodeName: nodeName, Store: n.st, DB: n.db, Service: n.svc,
		Logger: testLogger(t), OrphanInterval: time.Hour,
	}
	if tune != nil {
		tune(&opts)
	}
	s, err := New(opts)
	if err != nil {
		t.Fatal(err)
	}
	s.hooks = h
	a := &agent{node: n, syncer: s, cancel: func() {}, done: make(chan struct{})}
	close(a.done)
	t.Cleanup(a.stop)
	return a
}

// run starts the Syncer.
func (a *agent) run(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	a.cancel, a.done = cancel, make(chan struct{})
	go func() {
		defer close(a.done)
		if err := a.syncer.Run(ctx); err != nil {
			t.Errorf("run syncer: %v", err)
		}
	}()
}

// stop stops the Syncer and closes the state file, as a crash of the
// agent would (nothing is flushed that was not already durable).
func (a *agent) stop() {
	a.once.Do(func() {
		a.cancel()
		<-a.done
		a.node.close()
	})
}

// ready waits for the agent's blocks.
func (a *agent) ready(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	if err := a.syncer.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
}

// testLogger sends the agent's log to the test's, for a failure to show.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(&testWriter{t: t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct {
	mu sync.Mutex
	t  *testing.T
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

var _ io.Writer = (*testWriter)(nil)

// startPod runs a pod on the agent's node as the kubelet does: the pod
// exists, its ADD allocates, its status reports the address.
func (c *cluster) startPod(t *testing.T, a *agent, name, nodeName string) (pod, netip.Addr) {
	t.Helper()
	p := c.createPod(t, name, nodeName)
	addr := a.mustAdd(t, "sandbox-"+name, p)
	c.podRunning(t, p, addr)
	return p, addr
}
