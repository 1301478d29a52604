package source

import (
	"log/slog"
	"testing"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/store"
	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	discoveryv1 "lockstep.dev/lockstep/kube/api/discovery/v1"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	networkingv1 "lockstep.dev/lockstep/kube/api/networking/v1"
	"lockstep.dev/lockstep/kube/api/types"
)

// fakeCache is what the informers hold, by kind and key.
type fakeCache [numKinds]map[string]any

func newFakeCache() *fakeCache {
	var c fakeCache
	for k := range numKinds {
		c[k] = map[string]any{}
	}
	return &c
}

func (c *fakeCache) lookup(k kind, key string) (any, bool) {
	obj, ok := c[k][key]
	return obj, ok
}

// commit applies a batch of keys in one write transaction, as Run does,
// and returns whether it changed the store and the store revisions before
// and after.
func commit(t *testing.T, st *store.Store, c *fakeCache, keys [numKinds][]string) (bool, uint64, uint64) {
	t.Helper()
	before := store.Revision(st.ReadTxn(), "")
	txn := st.WriteTxn()
	defer txn.Abort()
	b := batch{keys: keys}
	changed, err := b.apply(txn, c.lookup, converter{node: "node-a", log: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if changed {
		txn.Commit()
	}
	return changed, before, store.Revision(st.ReadTxn(), "")
}

func testPod(name, nodeName, ip string, labels map[string]string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "prod", UID: types.UID("uid-" + name), Labels: labels},
		Spec:       corev1.PodSpec{NodeName: nodeName},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if ip != "" {
		p.Status.PodIP, p.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	}
	return p
}

// TestBatchIsOneTransaction walks a namespace, a local and a remote pod and
// a policy through their life: each batch is one store revision, what does
// not change the policy objects writes nothing, and deletions land.
func TestBatchIsOneTransaction(t *testing.T) {
	st, err := store.New()
	if err != nil {
		t.Fatal(err)
	}
	c := newFakeCache()
	c[kindNamespace]["prod"] = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "prod", Labels: map[string]string{"team": "a"}}}
	c[kindPod]["prod/local"] = testPod("local", "node-a", "10.244.0.5", map[string]string{"app": "server"})
	c[kindPod]["prod/remote"] = testPod("remote", "node-b", "10.244.1.5", map[string]string{"app": "client"})
	c[kindPolicy]["prod/allow"] = &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "allow", Namespace: "prod"},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "server"}}}}
	all := [numKinds][]string{{"prod"}, {"prod/local", "prod/remote"}, {"prod/allow"}}

	t.Run("first batch", func(t *testing.T) {
		changed, before, after := commit(t, st, c, all)
		if !changed || after != before+1 {
			t.Fatalf("changed=%v, revision %d -> %d; want one revision", changed, before, after)
		}
		txn := st.ReadTxn()
		local, _ := store.PodByName(txn, nil, "prod", "local")
		remote, _ := store.PodByName(txn, nil, "prod", "remote")
		if local == nil || remote == nil {
			t.Fatal("pods not stored")
		}
		if len(local.Object.Status.PodIPs) != 0 {
			t.Errorf("local pod stored with API addresses %v", local.Object.Status.PodIPs)
		}
		if len(remote.Object.Status.PodIPs) != 1 || remote.Object.Status.PodIPs[0].IP != "10.244.1.5" {
			t.Errorf("remote pod stored with addresses %v, want 10.244.1.5", remote.Object.Status.PodIPs)
		}
		if np, _ := store.PolicyByName(txn, nil, "prod", "allow"); np == nil {
			t.Error("policy not stored")
		}
		ids, _ := store.Identities(txn, nil)
		if len(ids) != 2 {
			t.Errorf("%d identities, want 2 (server, client)", len(ids))
		}
	})

	t.Run("status noise writes nothing", func(t *testing.T) {
		p := c[kindPod]["prod/remote"].(*corev1.Pod).DeepCopy()
		p.ResourceVersion = "42"
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		c[kindPod]["prod/remote"] = p
		if changed, before, after := commit(t, st, c, all); changed || after != before {
			t.Fatalf("changed=%v, revision %d -> %d; want no write", changed, before, after)
		}
	})

	t.Run("a remote pod's new address and a namespace label in one revision", func(t *testing.T) {
		c[kindPod]["prod/remote"] = testPod("remote", "node-b", "10.244.1.6", map[string]string{"app": "client"})
		c[kindNamespace]["prod"] = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "prod", Labels: map[string]string{"team": "b"}}}
		changed, before, after := commit(t, st, c, [numKinds][]string{{"prod"}, {"prod/remote"}, nil})
		if !changed || after != before+1 {
			t.Fatalf("changed=%v, revision %d -> %d; want one revision", changed, before, after)
		}
		txn := st.ReadTxn()
		remote, _ := store.PodByName(txn, nil, "prod", "remote")
		if remote.Object.Status.PodIPs[0].IP != "10.244.1.6" {
			t.Errorf("remote address = %v", remote.Object.Status.PodIPs)
		}
		ns, _ := store.NamespaceByName(txn, nil, "prod")
		if ns.Labels["team"] != "b" {
			t.Errorf("namespace labels = %v", ns.Labels)
		}
	})

	t.Run("a policy that turns invalid stays in the store, to fail closed", func(t *testing.T) {
		c[kindPolicy]["prod/allow"] = &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "allow", Namespace: "prod"},
			Spec: networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
				{IPBlock: &networkingv1.IPBlock{CIDR: "nonsense"}}}}}}}
		if changed, _, _ := commit(t, st, c, [numKinds][]string{nil, nil, {"prod/allow"}}); !changed {
			t.Fatal("nothing changed")
		}
		np, _ := store.PolicyByName(st.ReadTxn(), nil, "prod", "allow")
		if np == nil || np.Spec.Ingress[0].From[0].IPBlock.CIDR != "nonsense" {
			t.Fatalf("stored %+v, want the invalid policy as converted (left out, its pods would lose their isolation)", np)
		}
		if np.Validate() == nil {
			t.Error("the stored policy validates")
		}
	})

	t.Run("deletions", func(t *testing.T) {
		delete(c[kindNamespace], "prod")
		delete(c[kindPod], "prod/local")
		delete(c[kindPod], "prod/remote")
		delete(c[kindPolicy], "prod/allow")
		changed, before, after := commit(t, st, c, all)
		if !changed || after != before+1 {
			t.Fatalf("changed=%v, revision %d -> %d; want one revision", changed, before, after)
		}
		txn := st.ReadTxn()
		pods, _ := store.Pods(txn, nil)
		nss, _ := store.Namespaces(txn, nil)
		ids, _ := store.Identities(txn, nil)
		if len(pods)+len(nss)+len(ids) != 0 {
			t.Errorf("left: %d pods, %d namespaces, %d identities", len(pods), len(nss), len(ids))
		}
		if changed, _, _ := commit(t, st, c, all); changed {
			t.Error("deleting what is gone changed the store")
		}
	})
}

// TestBatchServices: Services and EndpointSlices commit in the batches of
// the other kinds: a policy and the slice of the Service it allows land in
// one revision; a slice's status noise (a new resourceVersion, a node name)
// writes nothing; an invalid Service is left out; deletions land.
func TestBatchServices(t *testing.T) {
	st, err := store.New()
	if err != nil {
		t.Fatal(err)
	}
	c := newFakeCache()
	yes := true
	name, port := "", int32(8080)
	slice := func(addrs ...string) *discoveryv1.EndpointSlice {
		s := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: "server-x1", Namespace: "prod", Labels: map[string]string{policyapi.ServiceNameLabel: "server"}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
		}
		for _, a := range addrs {
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, Conditions: discoveryv1.EndpointConditions{Ready: &yes}})
		}
		return s
	}
	c[kindService]["prod/server"] = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "server", Namespace: "prod"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.20", ClusterIPs: []string{"10.96.0.20"}, Ports: []corev1.ServicePort{{Port: 80, Protocol: corev1.ProtocolTCP}}}}
	c[kindEndpointSlice]["prod/server-x1"] = slice()
	keys := func(policies, services, slices []string) [numKinds][]string {
		var k [numKinds][]string
		k[kindPolicy], k[kindService], k[kindEndpointSlice] = policies, services, slices
		return k
	}
	if changed, before, after := commit(t, st, c, keys(nil, []string{"prod/server"}, []string{"prod/server-x1"})); !changed || after != before+1 {
		t.Fatalf("first batch: changed=%v, revision %d -> %d", changed, before, after)
	}

	// The server becomes ready as a policy allowing it appears: one batch,
	// one revision with both.
	c[kindEndpointSlice]["prod/server-x1"] = slice("10.244.1.7")
	c[kindPolicy]["prod/allow"] = &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "allow", Namespace: "prod"}}
	changed, before, after := commit(t, st, c, keys([]string{"prod/allow"}, nil, []string{"prod/server-x1"}))
	if !changed || after != before+1 {
		t.Fatalf("policy and slice: changed=%v, revision %d -> %d; want one revision", changed, before, after)
	}
	cs, err := store.ChangesSince(st.ReadTxn(), before)
	if err != nil {
		t.Fatal(err)
	}
	tables := map[string]bool{}
	for _, ch := range cs {
		tables[ch.Table] = true
	}
	if !tables[store.TablePolicies] || !tables[store.TableEndpointSlices] {
		t.Errorf("revision %d changed %v, want the policy and the slice", after, tables)
	}

	// Noise the dataplane does not read writes nothing.
	noisy := slice("10.244.1.7")
	noisy.ResourceVersion, noisy.Endpoints[0].Zone = "77", ptr("zone-b")
	c[kindEndpointSlice]["prod/server-x1"] = noisy
	if changed, _, _ := commit(t, st, c, keys(nil, nil, []string{"prod/server-x1"})); changed {
		t.Error("a slice change the dataplane does not read wrote the store")
	}

	// A Service that turns invalid leaves the store, as policies do.
	c[kindService]["prod/server"] = &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "server", Namespace: "prod"},
		Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.20", Ports: []corev1.ServicePort{{Port: 80}, {Port: 81}}}}
	if changed, _, _ := commit(t, st, c, keys(nil, []string{"prod/server"}, nil)); !changed {
		t.Fatal("invalid service: nothing changed")
	}
	if svc, _ := store.ServiceByName(st.ReadTxn(), nil, "prod", "server"); svc != nil {
		t.Error("invalid service still stored")
	}

	delete(c[kindEndpointSlice], "prod/server-x1")
	if changed, _, _ := commit(t, st, c, keys(nil, []string{"prod/server"}, []string{"prod/server-x1"})); !changed {
		t.Fatal("deleting the slice changed nothing")
	}
	txn := st.ReadTxn()
	svcs, _ := store.Services(txn, nil)
	sls, _ := store.EndpointSlices(txn, nil)
	if len(svcs)+len(sls) != 0 {
		t.Errorf("left: %d services, %d slices", len(svcs), len(sls))
	}
}
