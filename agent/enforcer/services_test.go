package enforcer

import (
	"context"
	"net/netip"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/store"
)

// historyDataplane keeps every state applied.
type historyDataplane struct {
	mu      sync.Mutex
	applied []*policy.Desired
}

func (d *historyDataplane) Attach(string) error { return nil }
func (d *historyDataplane) Detach(string) error { return nil }
func (d *historyDataplane) Apply(want *policy.Desired) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.applied = append(d.applied, want)
	return nil
}

func (d *historyDataplane) states() []*policy.Desired {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*policy.Desired(nil), d.applied...)
}

// TestBackendAndPolicyInOneApply: a client pod's egress policy to app=server
// and the server's EndpointSlice, committed in one store transaction, reach
// the dataplane in one Apply. No applied state has the new backend with
// the old policy, or the reverse: a packet to the ClusterIP is translated
// to the server and judged by the policy that allows it, together.
func TestBackendAndPolicyInOneApply(t *testing.T) {
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
	client := netip.MustParseAddr("10.244.0.5")
	server := &policyapi.Pod{ObjectMeta: policyapi.ObjectMeta{Namespace: "prod", Name: "server", Labels: map[string]string{"app": "server"}},
		Status: policyapi.PodStatus{PodIPs: []policyapi.PodIP{{IP: "10.244.1.7"}}}}
	write(func(txn *store.Txn) error {
		if err := store.AttachEndpoint(txn, &store.Endpoint{
			Attachment: store.Attachment{ContainerID: "c1", IfName: "eth0"}, HostIfName: "lsclient", State: store.EndpointReady,
			Pod:       store.PodRef{Namespace: "prod", Name: "client"},
			Addresses: []store.AddressRef{{Pool: "v4", Addr: client, Bits: 24}},
		}); err != nil {
			return err
		}
		if err := store.UpsertPod(txn, &policyapi.Pod{ObjectMeta: policyapi.ObjectMeta{Namespace: "prod", Name: "client", Labels: map[string]string{"app": "client"}}}); err != nil {
			return err
		}
		if err := store.UpsertPod(txn, server); err != nil {
			return err
		}
		return store.UpsertService(txn, &policyapi.Service{ObjectMeta: policyapi.ObjectMeta{Namespace: "prod", Name: "server"},
			Spec: policyapi.ServiceSpec{ClusterIP: "10.96.0.20", Ports: []policyapi.ServicePort{{Port: 80, TargetPort: policyapi.FromInt(8080)}}}})
	})

	dp := &historyDataplane{}
	e := New(st, dp, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx, 0) }()
	defer func() { cancel(); <-done }()

	frontend := policy.ServiceFrontend{Addr: netip.MustParseAddr("10.96.0.20"), Port: 80, Proto: policyapi.ProtoTCP}
	backend := policy.ServiceBackend{Addr: netip.MustParseAddr("10.244.1.7"), Port: 8080}
	// What one applied state says: whether the client's egress is
	// isolated with a rule to the server, and whether the frontend has
	// the server as its backend.
	look := func(d *policy.Desired) (policyNew, backendNew bool) {
		if ep := d.Endpoints["lsclient"]; ep != nil && ep.EgressIsolated {
			for k := range ep.Rules {
				policyNew = policyNew || (k.Dir == policyapi.Egress && k.Peer >= policyapi.FirstPodIdentity)
			}
		}
		if ent := d.Services[frontend]; ent != nil {
			backendNew = len(ent.Backends) == 1 && ent.Backends[0] == backend
		}
		return
	}
	waitFor := func(what string, cond func(*policy.Desired) bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if s := dp.states(); len(s) > 0 && cond(s[len(s)-1]) {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
		t.Fatalf("the dataplane never got %s", what)
	}
	waitFor("the Service without backends", func(d *policy.Desired) bool { ent := d.Services[frontend]; return ent != nil && ent.Backends == nil })
	before := len(dp.states())

	ready := true
	name, proto, port := "", policyapi.TCP, int32(8080)
	write(func(txn *store.Txn) error {
		if err := store.UpsertPolicy(txn, &policyapi.NetworkPolicy{
			ObjectMeta: policyapi.ObjectMeta{Namespace: "prod", Name: "client-egress"},
			Spec: policyapi.NetworkPolicySpec{
				PodSelector: policyapi.LabelSelector{MatchLabels: map[string]string{"app": "client"}},
				PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeEgress},
				Egress: []policyapi.EgressRule{{To: []policyapi.NetworkPolicyPeer{{PodSelector: &policyapi.LabelSelector{MatchLabels: map[string]string{"app": "server"}}}},
					Ports: []policyapi.NetworkPolicyPort{{Port: policyapi.FromInt(8080)}}}},
			},
		}); err != nil {
			return err
		}
		return store.UpsertEndpointSlice(txn, &policyapi.EndpointSlice{
			ObjectMeta:  policyapi.ObjectMeta{Namespace: "prod", Name: "server-abc", Labels: map[string]string{policyapi.ServiceNameLabel: "server"}},
			AddressType: policyapi.AddressTypeIPv4,
			Endpoints:   []policyapi.SliceEndpoint{{Addresses: []string{"10.244.1.7"}, Conditions: policyapi.EndpointConditions{Ready: &ready}}},
			Ports:       []policyapi.EndpointSlicePort{{Name: &name, Protocol: &proto, Port: &port}},
		})
	})
	waitFor("the policy and the backend", func(d *policy.Desired) bool { p, b := look(d); return p && b })
	after := dp.states()[before:]
	for i, d := range after {
		if p, b := look(d); p != b {
			t.Errorf("apply %d after the commit: new policy %v, new backend %v; want both or neither", i, p, b)
		}
	}
	if len(after) != 1 {
		t.Errorf("%d applies for one transaction, want 1", len(after))
	}
	if c := e.Services(); c.Frontends != 1 || c.Backends != 1 || c.NoBackends != 0 {
		t.Errorf("Services() = %+v, want one frontend with one backend", c)
	}
}

// TestSetNodeKeepsLocalServicesLocal: the node SetNode names decides which
// endpoints a Service of internalTrafficPolicy Local translates to, in the
// compiles after SetNode, after a reset (SetLimits) and after a change of
// node, and the full compile of Snapshot with that Node agrees.
func TestSetNodeKeepsLocalServicesLocal(t *testing.T) {
	st, err := store.New()
	if err != nil {
		t.Fatal(err)
	}
	yes, name, proto, port := true, "", policyapi.TCP, int32(8080)
	local := policyapi.ServiceInternalTrafficPolicyLocal
	nodeB := "node-b"
	if err := st.Update(func(txn *store.Txn) error {
		if err := store.UpsertService(txn, &policyapi.Service{ObjectMeta: policyapi.ObjectMeta{Namespace: "prod", Name: "server"},
			Spec: policyapi.ServiceSpec{ClusterIP: "10.96.0.20", InternalTrafficPolicy: &local, Ports: []policyapi.ServicePort{{Port: 80}}}}); err != nil {
			return err
		}
		return store.UpsertEndpointSlice(txn, &policyapi.EndpointSlice{
			ObjectMeta:  policyapi.ObjectMeta{Namespace: "prod", Name: "server-abc", Labels: map[string]string{policyapi.ServiceNameLabel: "server"}},
			AddressType: policyapi.AddressTypeIPv4,
			Endpoints:   []policyapi.SliceEndpoint{{Addresses: []string{"10.244.1.7"}, Conditions: policyapi.EndpointConditions{Ready: &yes}, NodeName: &nodeB}},
			Ports:       []policyapi.EndpointSlicePort{{Name: &name, Protocol: &proto, Port: &port}},
		})
	}); err != nil {
		t.Fatal(err)
	}
	frontend := policy.ServiceFrontend{Addr: netip.MustParseAddr("10.96.0.20"), Port: 80, Proto: policyapi.ProtoTCP}
	dp := &historyDataplane{}
	e := New(st, dp, nil)
	for _, step := range []struct {
		name, node string
		reset      bool
		noLocal    bool
	}{
		{"on node-a", "node-a", false, true},
		{"on node-a, after a reset", "node-a", true, true},
		{"on node-b", "node-b", false, false},
		{"on node-b, after a reset", "node-b", true, false},
		{"on node-a again", "node-a", false, true},
	} {
		e.SetNode(step.node)
		if step.reset {
			e.SetLimits(policy.DefaultLimits)
		}
		if err := e.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		states := dp.states()
		got := states[len(states)-1].Services[frontend]
		if got == nil || got.NoLocalBackend != step.noLocal || (len(got.Backends) == 1) == step.noLocal {
			t.Errorf("%s: entry %+v, want no local backend %v", step.name, got, step.noLocal)
		}
		snap, err := Snapshot(st.ReadTxn())
		if err != nil {
			t.Fatal(err)
		}
		snap.Node = step.node
		want, err := policy.Compile(snap)
		if err != nil {
			t.Fatal(err)
		}
		if w := want.Services[frontend]; w == nil || !reflect.DeepEqual(*w, *got) {
			t.Errorf("%s: the enforcer applied %+v, the full compile gives %+v", step.name, got, w)
		}
		wantCounts := ServiceCounts{Frontends: 1, Backends: 1}
		if step.noLocal {
			wantCounts = ServiceCounts{Frontends: 1, NoLocalBackends: 1}
		}
		if c := e.Services(); c != wantCounts {
			t.Errorf("%s: Services() = %+v, want %+v", step.name, c, wantCounts)
		}
	}
}

// TestNodeZoneFollowsTheStore: this node's zone, a row of the store like
// any other input, picks the backends of a Service whose endpoints carry
// zone hints, in the apply of the revision that changed it, from the
// change log and after a reset alike; SnapshotFor's full compile agrees.
func TestNodeZoneFollowsTheStore(t *testing.T) {
	st, err := store.New()
	if err != nil {
		t.Fatal(err)
	}
	yes, name, proto, port := true, "", policyapi.TCP, int32(8080)
	endpoint := func(addr, zone string) policyapi.SliceEndpoint {
		return policyapi.SliceEndpoint{Addresses: []string{addr}, Conditions: policyapi.EndpointConditions{Ready: &yes},
			Hints: &policyapi.EndpointHints{ForZones: []policyapi.ForZone{{Name: zone}}}}
	}
	if err := st.Update(func(txn *store.Txn) error {
		if err := store.UpsertService(txn, &policyapi.Service{ObjectMeta: policyapi.ObjectMeta{Namespace: "prod", Name: "server"},
			Spec: policyapi.ServiceSpec{ClusterIP: "10.96.0.20", Ports: []policyapi.ServicePort{{Port: 80}}}}); err != nil {
			return err
		}
		return store.UpsertEndpointSlice(txn, &policyapi.EndpointSlice{
			ObjectMeta:  policyapi.ObjectMeta{Namespace: "prod", Name: "server-abc", Labels: map[string]string{policyapi.ServiceNameLabel: "server"}},
			AddressType: policyapi.AddressTypeIPv4,
			Endpoints:   []policyapi.SliceEndpoint{endpoint("10.244.1.7", "a"), endpoint("10.244.2.9", "b")},
			Ports:       []policyapi.EndpointSlicePort{{Name: &name, Protocol: &proto, Port: &port}},
		})
	}); err != nil {
		t.Fatal(err)
	}
	frontend := policy.ServiceFrontend{Addr: netip.MustParseAddr("10.96.0.20"), Port: 80, Proto: policyapi.ProtoTCP}
	dp := &historyDataplane{}
	e := New(st, dp, nil)
	e.SetNode("n1")
	for _, step := range []struct {
		name  string
		write func(*store.Txn) error
		reset bool
		want  []string
	}{
		{name: "no Node row: every endpoint", want: []string{"10.244.1.7", "10.244.2.9"}},
		{name: "zone a", write: func(txn *store.Txn) error { return store.UpsertNode(txn, &policyapi.Node{Name: "n1", Zone: "a"}) }, want: []string{"10.244.1.7"}},
		{name: "another node's row changes nothing", write: func(txn *store.Txn) error { return store.UpsertNode(txn, &policyapi.Node{Name: "n2", Zone: "b"}) }, want: []string{"10.244.1.7"}},
		{name: "zone b", write: func(txn *store.Txn) error { return store.UpsertNode(txn, &policyapi.Node{Name: "n1", Zone: "b"}) }, want: []string{"10.244.2.9"}},
		{name: "zone b, after a reset", reset: true, want: []string{"10.244.2.9"}},
		{name: "the Node row deleted", write: func(txn *store.Txn) error { return store.DeleteNode(txn, "n1") }, want: []string{"10.244.1.7", "10.244.2.9"}},
	} {
		if step.write != nil {
			if err := st.Update(step.write); err != nil {
				t.Fatal(err)
			}
		}
		if step.reset {
			e.SetLimits(policy.DefaultLimits)
		}
		if err := e.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		states := dp.states()
		got := states[len(states)-1].Services[frontend]
		var addrs []string
		for _, b := range got.Backends {
			addrs = append(addrs, b.Addr.String())
		}
		if !slices.Equal(addrs, step.want) {
			t.Errorf("%s: backends %v, want %v", step.name, addrs, step.want)
		}
		snap, err := SnapshotFor(st.ReadTxn(), "n1", NodePorts{})
		if err != nil {
			t.Fatal(err)
		}
		want, err := policy.Compile(snap)
		if err != nil {
			t.Fatal(err)
		}
		if w := want.Services[frontend]; w == nil || !reflect.DeepEqual(*w, *got) {
			t.Errorf("%s: the enforcer applied %+v, the full compile gives %+v", step.name, got, w)
		}
	}
}

// TestNodePortAddresses: SetNodePortAddresses chooses the node's addresses
// whose NodePorts are translated (all, the primary ones, those within
// prefixes) from the change log (the Node's addresses change) and after a
// reset alike; SnapshotFor with the same choice compiles the same
// frontends.
func TestNodePortAddresses(t *testing.T) {
	st, err := store.New()
	if err != nil {
		t.Fatal(err)
	}
	yes, name, proto, port := true, "", policyapi.TCP, int32(8080)
	if err := st.Update(func(txn *store.Txn) error {
		if err := store.UpsertService(txn, &policyapi.Service{ObjectMeta: policyapi.ObjectMeta{Namespace: "prod", Name: "server"},
			Spec: policyapi.ServiceSpec{Type: policyapi.ServiceTypeNodePort, ClusterIP: "10.96.0.20", Ports: []policyapi.ServicePort{{Port: 80, NodePort: 30080}}}}); err != nil {
			return err
		}
		return store.UpsertEndpointSlice(txn, &policyapi.EndpointSlice{
			ObjectMeta:  policyapi.ObjectMeta{Namespace: "prod", Name: "server-abc", Labels: map[string]string{policyapi.ServiceNameLabel: "server"}},
			AddressType: policyapi.AddressTypeIPv4,
			Endpoints:   []policyapi.SliceEndpoint{{Addresses: []string{"10.244.1.7"}, Conditions: policyapi.EndpointConditions{Ready: &yes}}},
			Ports:       []policyapi.EndpointSlicePort{{Name: &name, Protocol: &proto, Port: &port}},
		})
	}); err != nil {
		t.Fatal(err)
	}
	dp := &historyDataplane{}
	e := New(st, dp, nil)
	e.SetNode("n1")
	primary, secondary := netip.MustParseAddr("192.168.0.11"), netip.MustParseAddr("10.1.0.11")
	nodePorts := func(d *policy.Desired) []string {
		var out []string
		for fe := range d.Services {
			if fe.Port == 30080 {
				out = append(out, fe.Addr.String())
			}
		}
		slices.Sort(out)
		return out
	}
	var chosen NodePorts
	within := func(s string) NodePorts { return NodePorts{Prefixes: []netip.Prefix{netip.MustParsePrefix(s)}} }
	for _, step := range []struct {
		name   string
		write  func(*store.Txn) error
		set    bool // SetNodePortAddresses(choose), which resets the compiler
		choose NodePorts
		want   []string
	}{
		{name: "two InternalIPs, all", write: func(txn *store.Txn) error {
			return store.UpsertNode(txn, &policyapi.Node{Name: "n1", Addrs: []netip.Addr{primary, secondary}})
		}, want: []string{"10.1.0.11", "192.168.0.11"}},
		{name: "primary", set: true, choose: NodePorts{Primary: true}, want: []string{"192.168.0.11"}},
		{name: "narrowed to 192.168.0.0/16", set: true, choose: within("192.168.0.0/16"), want: []string{"192.168.0.11"}},
		{name: "the Node's addresses change, still narrowed", write: func(txn *store.Txn) error {
			return store.UpsertNode(txn, &policyapi.Node{Name: "n1", Addrs: []netip.Addr{secondary, netip.MustParseAddr("192.168.0.12")}})
		}, want: []string{"192.168.0.12"}},
		{name: "a prefix with none of them", set: true, choose: within("172.16.0.0/12")},
		{name: "primary, now the other", set: true, choose: NodePorts{Primary: true}, want: []string{"10.1.0.11"}},
		{name: "cleared", set: true, want: []string{"10.1.0.11", "192.168.0.12"}},
	} {
		if step.write != nil {
			if err := st.Update(step.write); err != nil {
				t.Fatal(err)
			}
		}
		if step.set {
			chosen = step.choose
			e.SetNodePortAddresses(chosen)
		}
		if err := e.Sync(context.Background()); err != nil {
			t.Fatal(err)
		}
		states := dp.states()
		if got := nodePorts(states[len(states)-1]); !slices.Equal(got, step.want) {
			t.Errorf("%s: NodePort frontends on %v, want %v", step.name, got, step.want)
		}
		snap, err := SnapshotFor(st.ReadTxn(), "n1", chosen)
		if err != nil {
			t.Fatal(err)
		}
		want, err := policy.Compile(snap)
		if err != nil {
			t.Fatal(err)
		}
		if got := nodePorts(want); !slices.Equal(got, step.want) {
			t.Errorf("%s: the full compile has NodePort frontends on %v, want %v", step.name, got, step.want)
		}
	}
}

func TestNodePortsAddrs(t *testing.T) {
	a := func(s string) netip.Addr { return netip.MustParseAddr(s) }
	within := func(s ...string) NodePorts {
		var n NodePorts
		for _, p := range s {
			n.Prefixes = append(n.Prefixes, netip.MustParsePrefix(p))
		}
		return n
	}
	node := []netip.Addr{a("192.168.0.11"), a("fd00::11"), a("10.1.0.11"), a("fd00::12")}
	for _, tc := range []struct {
		name   string
		addrs  []netip.Addr
		choose NodePorts
		want   []netip.Addr
	}{
		{name: "all", addrs: node, want: node},
		{name: "primary: the first of each family", addrs: node, choose: NodePorts{Primary: true}, want: []netip.Addr{a("192.168.0.11"), a("fd00::11")}},
		{name: "primary of one family", addrs: []netip.Addr{a("10.1.0.11"), a("192.168.0.11")}, choose: NodePorts{Primary: true}, want: []netip.Addr{a("10.1.0.11")}},
		{name: "primary, IPv6 first", addrs: []netip.Addr{a("fd00::12"), a("10.1.0.11"), a("fd00::11")}, choose: NodePorts{Primary: true}, want: []netip.Addr{a("fd00::12"), a("10.1.0.11")}},
		{name: "primary of none", choose: NodePorts{Primary: true}},
		{name: "one family's CIDR", addrs: node, choose: within("fd00::/64"), want: []netip.Addr{a("fd00::11"), a("fd00::12")}},
		{name: "a CIDR holding the second", addrs: node, choose: within("10.0.0.0/8"), want: []netip.Addr{a("10.1.0.11")}},
		{name: "two CIDRs", addrs: node, choose: within("10.0.0.0/8", "fd00::12/128"), want: []netip.Addr{a("10.1.0.11"), a("fd00::12")}},
		{name: "a CIDR holding none", addrs: node, choose: within("172.16.0.0/12")},
	} {
		if got := tc.choose.Addrs(tc.addrs); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %+v.Addrs(%v) = %v, want %v", tc.name, tc.choose, tc.addrs, got, tc.want)
		}
	}
}
