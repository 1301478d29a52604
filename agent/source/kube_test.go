//go:build linux

package source

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/enforcer"
	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/store"
	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	discoveryv1 "lockstep.dev/lockstep/kube/api/discovery/v1"
	"lockstep.dev/lockstep/kube/api/intstr"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/runtime"
	"lockstep.dev/lockstep/kube/client"
	"lockstep.dev/lockstep/test/kubetest"
)

// TestKubeServicesCompiled runs the source against a real kube-apiserver
// with exactly the agent's RBAC (deploy/rbac.yaml, the lockstep-agent
// ServiceAccount's token): a Service and an EndpointSlice created through
// the API show up in the compiled state, with the ClusterIP the API server
// allocated, and follow the slice's readiness, a terminating fallback and
// the Service's deletion, and its endpoints' zone hints follow the zone of
// the agent's Node.
func TestKubeServicesCompiled(t *testing.T) {
	env := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	for _, args := range [][]string{
		{"apply", "-f", "../../deploy/crds"},
		{"apply", "-f", "../../deploy/rbac.yaml"},
		{"wait", "--for=condition=Established", "--timeout=60s", "crd/nodeipams.lockstep.dev"},
	} {
		if out, err := env.Kubectl(ctx, nil, args...); err != nil {
			t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	token, err := env.Kubectl(ctx, nil, "-n", "kube-system", "create", "token", "lockstep-agent")
	if err != nil {
		t.Fatalf("token of the agent's ServiceAccount: %v\n%s", err, token)
	}
	cfg := func(token string) *client.Config {
		return &client.Config{Host: env.Host, BearerToken: token, CAFile: env.CAFile, QPS: 200, Burst: 400}
	}
	admin := cfg(env.Token)
	core, err := client.ForGroup(admin, corev1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	discovery, err := client.ForGroup(admin, discoveryv1.SchemeGroupVersion)
	if err != nil {
		t.Fatal(err)
	}
	create := func(c client.Interface, resource, ns string, in, out runtime.Object) {
		t.Helper()
		req := c.Post().Resource(resource).Body(in)
		if ns != "" {
			req = req.Namespace(ns)
		}
		if err := req.Do(ctx).Into(out); err != nil {
			t.Fatalf("create %s: %v", resource, err)
		}
	}
	create(core, "namespaces", "", &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "prod"}}, &corev1.Namespace{})
	svc := &corev1.Service{}
	create(core, "services", "prod", &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "server"},
		Spec: corev1.ServiceSpec{
			Selector:        map[string]string{"app": "server"},
			SessionAffinity: corev1.ServiceAffinityClientIP,
			Ports:           []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}, svc)
	clusterIP, err := netip.ParseAddr(svc.Spec.ClusterIP)
	if err != nil {
		t.Fatalf("the API server allocated ClusterIP %q: %v", svc.Spec.ClusterIP, err)
	}
	// No controller-manager runs: the test writes the slice its
	// endpoint-slice controller would.
	yes, no := true, false
	slice := func(ready *bool, terminating *bool) *discoveryv1.EndpointSlice {
		name, proto, port := "http", corev1.ProtocolTCP, int32(8080)
		return &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "server-abc", Labels: map[string]string{discoveryv1.LabelServiceName: "server"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{
				{Addresses: []string{"10.244.1.7"}, Conditions: discoveryv1.EndpointConditions{Ready: ready, Terminating: terminating}},
				{Addresses: []string{"10.244.2.9"}, Conditions: discoveryv1.EndpointConditions{Ready: &no}},
			},
			Ports: []discoveryv1.EndpointPort{{Name: &name, Protocol: &proto, Port: &port}},
		}
	}
	created := &discoveryv1.EndpointSlice{}
	create(discovery, "endpointslices", "prod", slice(&yes, nil), created)

	st, err := store.New()
	if err != nil {
		t.Fatal(err)
	}
	src, err := New(Options{Config: cfg(strings.TrimSpace(string(token))), NodeName: "node-a", Store: st,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	go src.Run(ctx)
	syncCtx, syncCancel := context.WithTimeout(ctx, time.Minute)
	defer syncCancel()
	if err := src.WaitSynced(syncCtx); err != nil {
		t.Fatalf("the source never synced with the agent's RBAC: %v", err)
	}

	dp := &recorder{}
	enf := enforcer.New(st, dp, nil)
	enf.SetNode("node-a")
	frontend := policy.ServiceFrontend{Addr: clusterIP, Port: 80, Proto: policyapi.ProtoTCP}
	backend := policy.ServiceBackend{Addr: netip.MustParseAddr("10.244.1.7"), Port: 8080}
	waitFor := func(what string, ok func(*policy.ServiceEntry) bool) {
		t.Helper()
		var got *policy.ServiceEntry
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			if err := enf.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if got = dp.last.Services[frontend]; ok(got) {
				return
			}
		}
		t.Fatalf("%s: frontend %s:80 compiled to %+v", what, clusterIP, got)
	}
	waitFor("the Service and its ready endpoint", func(e *policy.ServiceEntry) bool {
		return e != nil && e.Service == "prod/server" && slices.Equal(e.Backends, []policy.ServiceBackend{backend}) &&
			e.AffinityTimeout == policyapi.DefaultAffinityTimeout
	})

	update := func(s *discoveryv1.EndpointSlice) {
		t.Helper()
		cur := &discoveryv1.EndpointSlice{}
		if err := discovery.Get().Namespace("prod").Resource("endpointslices").Name("server-abc").Do(ctx).Into(cur); err != nil {
			t.Fatal(err)
		}
		s.ResourceVersion = cur.ResourceVersion
		if err := discovery.Put().Namespace("prod").Resource("endpointslices").Name("server-abc").Body(s).Do(ctx).Error(); err != nil {
			t.Fatalf("update the slice: %v", err)
		}
	}
	update(slice(&no, &yes))
	waitFor("no ready endpoint: the terminating one that still serves", func(e *policy.ServiceEntry) bool {
		return e != nil && slices.Equal(e.Backends, []policy.ServiceBackend{backend})
	})
	update(slice(&no, &no))
	waitFor("no endpoint at all: the frontend without backends", func(e *policy.ServiceEntry) bool {
		return e != nil && len(e.Backends) == 0
	})

	// Zone hints, as the endpoint-slice controller writes them for a
	// Service of trafficDistribution PreferClose: this node's zone, from
	// its Node's label, picks the backends, and follows the label.
	hinted := slice(&yes, nil)
	hinted.Endpoints[1].Conditions.Ready = &yes
	hinted.Endpoints[0].Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z1"}}}
	hinted.Endpoints[1].Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z2"}}}
	update(hinted)
	other := policy.ServiceBackend{Addr: netip.MustParseAddr("10.244.2.9"), Port: 8080}
	waitFor("zone hints on a node the API server does not have: every endpoint", func(e *policy.ServiceEntry) bool {
		return e != nil && slices.Equal(e.Backends, []policy.ServiceBackend{backend, other})
	})
	create(core, "nodes", "", &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{corev1.LabelTopologyZone: "z1"}}}, &corev1.Node{})
	waitFor("zone hints on a node of zone z1", func(e *policy.ServiceEntry) bool {
		return e != nil && slices.Equal(e.Backends, []policy.ServiceBackend{backend})
	})
	node := &corev1.Node{}
	if err := core.Get().Resource("nodes").Name("node-a").Do(ctx).Into(node); err != nil {
		t.Fatal(err)
	}
	node.Labels[corev1.LabelTopologyZone] = "z2"
	if err := core.Put().Resource("nodes").Name("node-a").Body(node).Do(ctx).Error(); err != nil {
		t.Fatalf("relabel the node: %v", err)
	}
	waitFor("the node relabelled to zone z2", func(e *policy.ServiceEntry) bool {
		return e != nil && slices.Equal(e.Backends, []policy.ServiceBackend{other})
	})
	if err := core.Delete().Resource("nodes").Name("node-a").Do(ctx).Error(); err != nil {
		t.Fatal(err)
	}
	waitFor("the node deleted: every endpoint", func(e *policy.ServiceEntry) bool {
		return e != nil && slices.Equal(e.Backends, []policy.ServiceBackend{backend, other})
	})
	if err := core.Delete().Namespace("prod").Resource("services").Name("server").Do(ctx).Error(); err != nil {
		t.Fatal(err)
	}
	waitFor("the Service deleted", func(e *policy.ServiceEntry) bool { return e == nil })
	// What is left is the API server's own Service, default/kubernetes,
	// without backends (this API server reconciles no endpoints).
	for fe, e := range dp.last.Services {
		if e.Service != "default/kubernetes" || fe.Port != 443 || len(e.Backends) != 0 {
			t.Errorf("frontend %+v left: %+v, want only default/kubernetes's", fe, e)
		}
	}
}

// recorder is a dataplane that keeps the last state applied.
type recorder struct{ last *policy.Desired }

func (r *recorder) Attach(string) error { return nil }
func (r *recorder) Detach(string) error { return nil }
func (r *recorder) Apply(d *policy.Desired) error {
	r.last = d
	return nil
}
