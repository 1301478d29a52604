package source

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	discoveryv1 "lockstep.dev/lockstep/kube/api/discovery/v1"
	"lockstep.dev/lockstep/kube/api/intstr"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
)

func TestConvertService(t *testing.T) {
	cluster, local := policyapi.ServiceInternalTrafficPolicyCluster, policyapi.ServiceInternalTrafficPolicyLocal
	meta := metav1.ObjectMeta{Name: "web", Namespace: "prod", UID: "svc-uid", ResourceVersion: "9",
		Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"a": "b"}}
	tests := []struct {
		name       string
		spec       corev1.ServiceSpec
		status     corev1.ServiceStatus
		want       policyapi.ServiceSpec
		wantStatus policyapi.ServiceStatus
	}{
		{
			name: "ClusterIP, ports with number and name targets, selector",
			spec: corev1.ServiceSpec{
				Type: corev1.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
				Selector: map[string]string{"app": "web"}, SessionAffinity: corev1.ServiceAffinityNone,
				Ports: []corev1.ServicePort{
					{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromString("http"), NodePort: 30080},
					{Name: "dns", Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: intstr.FromInt32(5353)},
				},
				ExternalIPs: []string{"192.0.2.1"}, IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol},
			},
			want: policyapi.ServiceSpec{
				Type: policyapi.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
				Selector: map[string]string{"app": "web"}, SessionAffinity: policyapi.ServiceAffinityNone, InternalTrafficPolicy: &cluster,
				Ports: []policyapi.ServicePort{
					{Name: "http", Protocol: policyapi.TCP, Port: 80, TargetPort: policyapi.FromString("http"), NodePort: 30080},
					{Name: "dns", Protocol: policyapi.UDP, Port: 53, TargetPort: policyapi.FromInt(5353)},
				},
				ExternalIPs: []string{"192.0.2.1"},
			},
		},
		{
			name: "LoadBalancer: its addresses, traffic policy and source ranges; hostnames left out",
			spec: corev1.ServiceSpec{
				Type: corev1.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.10", Ports: []corev1.ServicePort{{Port: 80, NodePort: 30080}},
				ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyLocal, LoadBalancerSourceRanges: []string{"192.0.2.0/24"},
			},
			status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{
				{IP: "198.51.100.20"}, {Hostname: "lb.example"}, {IP: "2001:db8::20", IPMode: ptr(corev1.LoadBalancerIPModeProxy)},
			}}},
			want: policyapi.ServiceSpec{
				Type: policyapi.ServiceTypeLoadBalancer, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
				SessionAffinity: policyapi.ServiceAffinityNone, InternalTrafficPolicy: &cluster,
				Ports:                 []policyapi.ServicePort{{Protocol: policyapi.TCP, Port: 80, TargetPort: policyapi.FromInt(80), NodePort: 30080}},
				ExternalTrafficPolicy: policyapi.ServiceExternalTrafficPolicyLocal, LoadBalancerSourceRanges: []string{"192.0.2.0/24"},
			},
			wantStatus: policyapi.ServiceStatus{LoadBalancer: policyapi.LoadBalancerStatus{Ingress: []policyapi.LoadBalancerIngress{
				{IP: "198.51.100.20"}, {IP: "2001:db8::20", IPMode: ptr(policyapi.LoadBalancerIPModeProxy)},
			}}},
		},
		{
			name: "dual stack, ClientIP affinity with its timeout; a missing targetPort is the port",
			spec: corev1.ServiceSpec{
				Type: corev1.ServiceTypeNodePort, ClusterIP: "fd00:96::10", ClusterIPs: []string{"fd00:96::10", "10.96.0.10"},
				SessionAffinity:       corev1.ServiceAffinityClientIP,
				SessionAffinityConfig: &corev1.SessionAffinityConfig{ClientIP: &corev1.ClientIPConfig{TimeoutSeconds: ptr[int32](60)}},
				Ports:                 []corev1.ServicePort{{Protocol: corev1.ProtocolSCTP, Port: 9000}},
			},
			want: policyapi.ServiceSpec{
				Type: policyapi.ServiceTypeNodePort, ClusterIP: "fd00:96::10", ClusterIPs: []string{"fd00:96::10", "10.96.0.10"},
				SessionAffinity:       policyapi.ServiceAffinityClientIP,
				SessionAffinityConfig: &policyapi.SessionAffinityConfig{ClientIP: &policyapi.ClientIPConfig{TimeoutSeconds: ptr[int32](60)}},
				Ports:                 []policyapi.ServicePort{{Protocol: policyapi.SCTP, Port: 9000, TargetPort: policyapi.FromInt(9000)}},
				InternalTrafficPolicy: &cluster,
			},
		},
		{
			name: "ClientIP affinity without a config gets the default timeout",
			spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10", SessionAffinity: corev1.ServiceAffinityClientIP, Ports: []corev1.ServicePort{{Port: 80}}},
			want: policyapi.ServiceSpec{
				Type: policyapi.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
				SessionAffinity:       policyapi.ServiceAffinityClientIP,
				SessionAffinityConfig: &policyapi.SessionAffinityConfig{ClientIP: &policyapi.ClientIPConfig{TimeoutSeconds: ptr[int32](10800)}},
				Ports:                 []policyapi.ServicePort{{Protocol: policyapi.TCP, Port: 80, TargetPort: policyapi.FromInt(80)}},
				InternalTrafficPolicy: &cluster,
			},
		},
		{
			name: "headless keeps None",
			spec: corev1.ServiceSpec{ClusterIP: "None", ClusterIPs: []string{"None"}, Selector: map[string]string{"app": "db"}},
			want: policyapi.ServiceSpec{Type: policyapi.ServiceTypeClusterIP, ClusterIP: "None", ClusterIPs: []string{"None"},
				Selector: map[string]string{"app": "db"}, SessionAffinity: policyapi.ServiceAffinityNone, InternalTrafficPolicy: &cluster},
		},
		{
			name: "internalTrafficPolicy Local",
			spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10", InternalTrafficPolicy: ptr(corev1.ServiceInternalTrafficPolicyLocal), Ports: []corev1.ServicePort{{Port: 80}}},
			want: policyapi.ServiceSpec{Type: policyapi.ServiceTypeClusterIP, ClusterIP: "10.96.0.10", ClusterIPs: []string{"10.96.0.10"},
				SessionAffinity: policyapi.ServiceAffinityNone, InternalTrafficPolicy: &local,
				Ports: []policyapi.ServicePort{{Protocol: policyapi.TCP, Port: 80, TargetPort: policyapi.FromInt(80)}}},
		},
		{
			name: "ExternalName",
			spec: corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "db.example", Ports: []corev1.ServicePort{{Port: 5432}}},
			want: policyapi.ServiceSpec{Type: policyapi.ServiceTypeExternalName, SessionAffinity: policyapi.ServiceAffinityNone,
				Ports: []policyapi.ServicePort{{Protocol: policyapi.TCP, Port: 5432, TargetPort: policyapi.FromInt(5432)}}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := &corev1.Service{ObjectMeta: meta, Spec: tc.spec, Status: tc.status}
			before := in.DeepCopy()
			got, err := ConvertService(in)
			if err != nil {
				t.Fatal(err)
			}
			want := &policyapi.Service{
				TypeMeta:   policyapi.TypeMeta{APIVersion: "v1", Kind: "Service"},
				ObjectMeta: policyapi.ObjectMeta{Name: "web", Namespace: "prod", UID: "svc-uid"},
				Spec:       tc.want,
				Status:     tc.wantStatus,
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got\n%s\nwant\n%s", show(got), show(want))
			}
			if !reflect.DeepEqual(in, before) {
				t.Error("ConvertService modified its input")
			}
			// What the informer caches converts the same.
			if trimmed, err := ConvertService(trim(before.DeepCopy()).(*corev1.Service)); err != nil || !reflect.DeepEqual(trimmed, want) {
				t.Errorf("trimmed service converts to %s, %v", show(trimmed), err)
			}
		})
	}
	// Of the labels, the one that hands the Service to another proxy is
	// kept, as listed and as cached.
	other := &corev1.Service{ObjectMeta: *meta.DeepCopy(), Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10", Ports: []corev1.ServicePort{{Port: 80}}}}
	other.Labels[policyapi.ServiceProxyNameLabel] = "other-proxy"
	for name, in := range map[string]*corev1.Service{"as listed": other, "as cached": trim(other.DeepCopy()).(*corev1.Service)} {
		got, err := ConvertService(in)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[string]string{policyapi.ServiceProxyNameLabel: "other-proxy"}; !reflect.DeepEqual(got.Labels, want) {
			t.Errorf("%s: labels %v, want %v", name, got.Labels, want)
		}
	}
	bad := &corev1.Service{ObjectMeta: meta, Spec: corev1.ServiceSpec{ClusterIP: "10.96.0.10",
		Ports: []corev1.ServicePort{{Port: 80}, {Port: 81}}}}
	if _, err := ConvertService(bad); err == nil || !strings.Contains(err.Error(), "name: required") {
		t.Errorf("two unnamed ports: %v, want an error", err)
	}
}

func TestConvertEndpointSlice(t *testing.T) {
	yes, no := true, false
	http, tcp, port := "http", corev1.ProtocolTCP, int32(8080)
	node, zone := "node-a", "z1"
	in := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "web-abcde", Namespace: "prod", UID: "slice-uid", ResourceVersion: "4",
			Labels: map[string]string{policyapi.ServiceNameLabel: "web", "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.244.1.5"}, Conditions: discoveryv1.EndpointConditions{Ready: &yes, Serving: &yes, Terminating: &no},
				NodeName: &node, Zone: &zone, TargetRef: &corev1.ObjectReference{Kind: "Pod", Name: "web-1"},
				Hints: &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "z1"}, {Name: "z2"}}, ForNodes: []discoveryv1.ForNode{{Name: "node-a"}}}},
			{Addresses: []string{"10.244.2.7"}, Conditions: discoveryv1.EndpointConditions{Ready: &no, Serving: &yes, Terminating: &yes}},
			{Addresses: []string{"10.244.3.9"}},
		},
		Ports: []discoveryv1.EndpointPort{{Name: &http, Protocol: &tcp, Port: &port}, {}},
	}
	before := in.DeepCopy()
	pTCP := policyapi.TCP
	want := &policyapi.EndpointSlice{
		TypeMeta:    policyapi.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta:  policyapi.ObjectMeta{Name: "web-abcde", Namespace: "prod", UID: "slice-uid", Labels: map[string]string{policyapi.ServiceNameLabel: "web"}},
		AddressType: policyapi.AddressTypeIPv4,
		Endpoints: []policyapi.SliceEndpoint{
			{Addresses: []string{"10.244.1.5"}, Conditions: policyapi.EndpointConditions{Ready: &yes, Serving: &yes, Terminating: &no}, NodeName: &node,
				Hints: &policyapi.EndpointHints{ForZones: []policyapi.ForZone{{Name: "z1"}, {Name: "z2"}}, ForNodes: []policyapi.ForNode{{Name: "node-a"}}}},
			{Addresses: []string{"10.244.2.7"}, Conditions: policyapi.EndpointConditions{Ready: &no, Serving: &yes, Terminating: &yes}},
			{Addresses: []string{"10.244.3.9"}},
		},
		Ports: []policyapi.EndpointSlicePort{{Name: &http, Protocol: &pTCP, Port: &port}, {}},
	}
	for name, obj := range map[string]*discoveryv1.EndpointSlice{"as listed": in, "as cached": trim(before.DeepCopy()).(*discoveryv1.EndpointSlice)} {
		got, err := ConvertEndpointSlice(obj)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got\n%s\nwant\n%s", name, show(got), show(want))
		}
	}
	if !reflect.DeepEqual(in, before) {
		t.Error("ConvertEndpointSlice modified its input")
	}
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{corev1.LabelTopologyZone: "z1", "other": "x"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeHostName, Address: "node-a"},
			{Type: corev1.NodeInternalIP, Address: "192.0.2.1"},
			{Type: corev1.NodeInternalIP, Address: "not-an-address"},
			{Type: corev1.NodeExternalIP, Address: "198.51.100.1"},
			{Type: corev1.NodeInternalIP, Address: "::ffff:192.0.2.1"},
			{Type: corev1.NodeInternalIP, Address: "2001:db8::1"},
			{Type: corev1.NodeInternalDNS, Address: "node-a.internal"},
		}},
	}
	wantNode := &policyapi.Node{Name: "node-a", Zone: "z1", Addrs: []netip.Addr{
		netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1"),
	}}
	for name, obj := range map[string]*corev1.Node{"as listed": n, "as cached": trim(n.DeepCopy()).(*corev1.Node)} {
		if got := ConvertNode(obj); !reflect.DeepEqual(got, wantNode) {
			t.Errorf("node %s: converted to %+v, want %+v", name, got, wantNode)
		}
	}
	cached := trim(before.DeepCopy()).(*discoveryv1.EndpointSlice)
	if cached.Endpoints[0].Zone != nil || cached.Endpoints[0].TargetRef != nil || len(cached.Labels) != 1 {
		t.Errorf("trim kept what nothing reads: %s", show(cached))
	}
	empty := before.DeepCopy()
	empty.Endpoints[0].Hints = &discoveryv1.EndpointHints{}
	if got, err := ConvertEndpointSlice(empty); err != nil || got.Endpoints[0].Hints != nil {
		t.Errorf("empty hints converted to %+v, %v; want none", got.Endpoints[0].Hints, err)
	}
	bad := before.DeepCopy()
	bad.AddressType = "IPv5"
	if _, err := ConvertEndpointSlice(bad); err == nil {
		t.Error("an unknown address type converted")
	}
}
