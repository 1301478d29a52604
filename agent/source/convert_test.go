package source

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	"lockstep.dev/lockstep/kube/api/intstr"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	networkingv1 "lockstep.dev/lockstep/kube/api/networking/v1"
)

func ptr[T any](v T) *T { return &v }

// show renders an object for a failure message.
func show(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

func TestConvertNamespace(t *testing.T) {
	tests := []struct {
		name string
		in   corev1.Namespace
		want map[string]string
	}{
		{"labels kept, name label added", corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "prod", UID: "u1", Labels: map[string]string{"team": "a"}}},
			map[string]string{"team": "a", policyapi.NamespaceNameLabel: "prod"}},
		{"no labels", corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "dev", UID: "u2"}},
			map[string]string{policyapi.NamespaceNameLabel: "dev"}},
		{"annotations dropped", corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "x", UID: "u3", Annotations: map[string]string{"a": "b"}}},
			map[string]string{policyapi.NamespaceNameLabel: "x"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ConvertNamespace(&tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if got.Name != tc.in.Name || got.UID != string(tc.in.UID) || !reflect.DeepEqual(got.Labels, tc.want) || got.Annotations != nil {
				t.Errorf("got %s, want name %s labels %v and no annotations", show(got), tc.in.Name, tc.want)
			}
		})
	}
	if _, err := ConvertNamespace(&corev1.Namespace{}); err == nil {
		t.Error("a namespace without a name converted")
	}
}

func TestConvertPod(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	base := func() *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod", UID: "uid-1", ResourceVersion: "7",
				Labels: map[string]string{"app": "web"}},
			Spec: corev1.PodSpec{NodeName: "node-b", Containers: []corev1.Container{{Name: "c"}}},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.5",
				PodIPs: []corev1.PodIP{{IP: "10.244.1.5"}, {IP: "fd00:10:244:1::5"}}},
		}
	}
	tests := []struct {
		name   string
		node   string
		modify func(*corev1.Pod)
		check  func(*testing.T, *policyapi.Pod)
	}{
		{name: "identity and labels", node: "node-a", check: func(t *testing.T, p *policyapi.Pod) {
			if p.Name != "web" || p.Namespace != "prod" || p.UID != "uid-1" || p.Labels["app"] != "web" || len(p.Labels) != 1 {
				t.Errorf("meta = %+v", p.ObjectMeta)
			}
			if p.ResourceVersion != "" {
				t.Errorf("resourceVersion %q kept: every status update would rewrite the store", p.ResourceVersion)
			}
		}},
		{name: "remote pod keeps podIPs", node: "node-a", check: func(t *testing.T, p *policyapi.Pod) {
			want := []policyapi.PodIP{{IP: "10.244.1.5"}, {IP: "fd00:10:244:1::5"}}
			if !reflect.DeepEqual(p.Status.PodIPs, want) || p.Status.PodIP != "10.244.1.5" || p.Spec.NodeName != "node-b" {
				t.Errorf("status = %+v, nodeName %q", p.Status, p.Spec.NodeName)
			}
		}},
		{name: "local pod: addresses come from CNI endpoints", node: "node-b", check: func(t *testing.T, p *policyapi.Pod) {
			if p.Status.PodIP != "" || p.Status.PodIPs != nil {
				t.Errorf("local pod kept API addresses %+v", p.Status)
			}
			if p.Spec.NodeName != "node-b" {
				t.Errorf("nodeName = %q", p.Spec.NodeName)
			}
		}},
		{name: "phase", node: "node-a", modify: func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, check: func(t *testing.T, p *policyapi.Pod) {
			if p.Status.Phase != policyapi.PodSucceeded {
				t.Errorf("phase = %q", p.Status.Phase)
			}
		}},
		{name: "hostNetwork", node: "node-a", modify: func(p *corev1.Pod) { p.Spec.HostNetwork = true }, check: func(t *testing.T, p *policyapi.Pod) {
			if !p.Spec.HostNetwork {
				t.Error("hostNetwork lost")
			}
		}},
		{name: "named container ports, protocol defaulted", node: "node-a", modify: func(p *corev1.Pod) {
			p.Spec.Containers = []corev1.Container{
				{Name: "web", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP}}},
				{Name: "noports"},
			}
		}, check: func(t *testing.T, p *policyapi.Pod) {
			want := []policyapi.Container{{Name: "web", Ports: []policyapi.ContainerPort{
				{Name: "http", ContainerPort: 8080, Protocol: policyapi.TCP}, {Name: "dns", ContainerPort: 53, Protocol: policyapi.UDP}}}}
			if !reflect.DeepEqual(p.Spec.Containers, want) {
				t.Errorf("containers = %s", show(p.Spec.Containers))
			}
		}},
		{name: "sidecar init containers count, plain init containers do not", node: "node-a", modify: func(p *corev1.Pod) {
			p.Spec.InitContainers = []corev1.Container{
				{Name: "setup", Ports: []corev1.ContainerPort{{Name: "setup", ContainerPort: 1}}},
				{Name: "proxy", RestartPolicy: &always, Ports: []corev1.ContainerPort{{Name: "metrics", ContainerPort: 9090, Protocol: corev1.ProtocolTCP}}},
			}
		}, check: func(t *testing.T, p *policyapi.Pod) {
			if len(p.Spec.Containers) != 1 || p.Spec.Containers[0].Name != "proxy" || p.Spec.Containers[0].Ports[0].Name != "metrics" {
				t.Errorf("containers = %s", show(p.Spec.Containers))
			}
		}},
		{name: "only lockstep annotations", node: "node-a", modify: func(p *corev1.Pod) {
			p.Annotations = map[string]string{"lockstep.dev/ip": "10.244.1.9", "kubectl.kubernetes.io/last-applied-configuration": "{...}"}
		}, check: func(t *testing.T, p *policyapi.Pod) {
			if !reflect.DeepEqual(p.Annotations, map[string]string{"lockstep.dev/ip": "10.244.1.9"}) {
				t.Errorf("annotations = %v", p.Annotations)
			}
		}},
		{name: "unscheduled pod", node: "node-a", modify: func(p *corev1.Pod) {
			p.Spec.NodeName, p.Status.PodIP, p.Status.PodIPs = "", "", nil
		}, check: func(t *testing.T, p *policyapi.Pod) {
			if p.Spec.NodeName != "" || p.Status.PodIPs != nil {
				t.Errorf("got %s", show(p))
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := base()
			if tc.modify != nil {
				tc.modify(in)
			}
			before := in.DeepCopy()
			got, err := ConvertPod(in, tc.node)
			if err != nil {
				t.Fatal(err)
			}
			tc.check(t, got)
			if !reflect.DeepEqual(in, before) {
				t.Error("ConvertPod modified its input")
			}
		})
	}
}

func TestConvertPodRefusesWhatPolicyCannotRead(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*corev1.Pod)
		want   string
	}{
		{"bad podIP", func(p *corev1.Pod) { p.Status.PodIPs = []corev1.PodIP{{IP: "10.244.1.300"}} }, "10.244.1.300"},
		{"port out of range", func(p *corev1.Pod) {
			p.Spec.Containers = []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{{ContainerPort: 70000}}}}
		}, "out of range"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
			tc.modify(p)
			if _, err := ConvertPod(p, "other"); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

func TestConvertNetworkPolicy(t *testing.T) {
	tcp, udp, sctp := corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP
	ptcp, pudp, psctp := policyapi.TCP, policyapi.UDP, policyapi.SCTP
	meta := metav1.ObjectMeta{Name: "np", Namespace: "prod", UID: "np-uid"}
	tests := []struct {
		name string
		spec networkingv1.NetworkPolicySpec
		want policyapi.NetworkPolicySpec
	}{
		{
			name: "empty podSelector selects all, policyTypes defaulted to Ingress",
			spec: networkingv1.NetworkPolicySpec{},
			want: policyapi.NetworkPolicySpec{PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeIngress}},
		},
		{
			name: "podSelector labels and expressions",
			spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{
				MatchLabels: map[string]string{"app": "web"},
				MatchExpressions: []metav1.LabelSelectorRequirement{
					{Key: "tier", Operator: metav1.LabelSelectorOpIn, Values: []string{"a", "b"}},
					{Key: "canary", Operator: metav1.LabelSelectorOpDoesNotExist},
				},
			}},
			want: policyapi.NetworkPolicySpec{
				PodSelector: policyapi.LabelSelector{
					MatchLabels: map[string]string{"app": "web"},
					MatchExpressions: []policyapi.LabelSelectorRequirement{
						{Key: "tier", Operator: policyapi.OpIn, Values: []string{"a", "b"}},
						{Key: "canary", Operator: policyapi.OpDoesNotExist},
					},
				},
				PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeIngress},
			},
		},
		{
			name: "egress rules make policyTypes Ingress and Egress",
			spec: networkingv1.NetworkPolicySpec{Egress: []networkingv1.NetworkPolicyEgressRule{{}}},
			want: policyapi.NetworkPolicySpec{
				Egress:      []policyapi.EgressRule{{}},
				PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeIngress, policyapi.PolicyTypeEgress},
			},
		},
		{
			name: "explicit policyTypes kept",
			spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}},
			want: policyapi.NetworkPolicySpec{PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeEgress}},
		},
		{
			name: "ports: numbers, names, endPort, protocols, TCP default",
			spec: networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{
				{Port: ptr(intstr.FromInt32(80))},
				{Protocol: &udp, Port: ptr(intstr.FromString("dns"))},
				{Protocol: &tcp, Port: ptr(intstr.FromInt32(30000)), EndPort: ptr(int32(32767))},
				{Protocol: &sctp},
			}}}},
			want: policyapi.NetworkPolicySpec{
				Ingress: []policyapi.IngressRule{{Ports: []policyapi.NetworkPolicyPort{
					{Protocol: &ptcp, Port: policyapi.FromInt(80)},
					{Protocol: &pudp, Port: policyapi.FromString("dns")},
					{Protocol: &ptcp, Port: policyapi.FromInt(30000), EndPort: ptr(int32(32767))},
					{Protocol: &psctp},
				}}},
				PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeIngress},
			},
		},
		{
			name: "peers: podSelector, namespaceSelector, both, ipBlock with except",
			spec: networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
				{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "client"}}},
				{NamespaceSelector: &metav1.LabelSelector{}},
				{PodSelector: &metav1.LabelSelector{}, NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "a"}}},
				{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: []string{"10.1.0.0/16"}}},
				{IPBlock: &networkingv1.IPBlock{CIDR: "fd00::/8"}},
			}}}},
			want: policyapi.NetworkPolicySpec{
				Ingress: []policyapi.IngressRule{{From: []policyapi.NetworkPolicyPeer{
					{PodSelector: &policyapi.LabelSelector{MatchLabels: map[string]string{"role": "client"}}},
					{NamespaceSelector: &policyapi.LabelSelector{}},
					{PodSelector: &policyapi.LabelSelector{}, NamespaceSelector: &policyapi.LabelSelector{MatchLabels: map[string]string{"team": "a"}}},
					{IPBlock: &policyapi.IPBlock{CIDR: "10.0.0.0/8", Except: []string{"10.1.0.0/16"}}},
					{IPBlock: &policyapi.IPBlock{CIDR: "fd00::/8"}},
				}}},
				PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeIngress},
			},
		},
		{
			name: "egress peers and ports",
			spec: networkingv1.NetworkPolicySpec{
				PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
				Egress: []networkingv1.NetworkPolicyEgressRule{{
					To:    []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}},
					Ports: []networkingv1.NetworkPolicyPort{{Port: ptr(intstr.FromString("postgres"))}},
				}},
			},
			want: policyapi.NetworkPolicySpec{
				Egress: []policyapi.EgressRule{{
					To:    []policyapi.NetworkPolicyPeer{{PodSelector: &policyapi.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}},
					Ports: []policyapi.NetworkPolicyPort{{Protocol: &ptcp, Port: policyapi.FromString("postgres")}},
				}},
				PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeEgress},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := &networkingv1.NetworkPolicy{ObjectMeta: meta, Spec: tc.spec}
			before := in.DeepCopy()
			got, err := ConvertNetworkPolicy(in)
			if err != nil {
				t.Fatal(err)
			}
			if got.Name != "np" || got.Namespace != "prod" || got.UID != "np-uid" {
				t.Errorf("meta = %+v", got.ObjectMeta)
			}
			if !reflect.DeepEqual(got.Spec, tc.want) {
				t.Errorf("spec:\n got %s\nwant %s", show(got.Spec), show(tc.want))
			}
			if !reflect.DeepEqual(in, before) {
				t.Error("ConvertNetworkPolicy modified its input")
			}
		})
	}
}

// TestConvertNetworkPolicyReportsInvalid: what the compiler cannot
// enforce as written is reported here, and still converted, so that it
// is stored and fails closed rather than leave its pods without isolation.
func TestConvertNetworkPolicyReportsInvalid(t *testing.T) {
	tests := []struct {
		name string
		spec networkingv1.NetworkPolicySpec
	}{
		{"bad cidr", networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{
			{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/33"}}}}}}},
		{"endPort below port", networkingv1.NetworkPolicySpec{Ingress: []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{
			{Port: ptr(intstr.FromInt32(90)), EndPort: ptr(int32(80))}}}}}},
		{"bad operator", networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "a", Operator: "Near"}}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: "prod"}, Spec: tc.spec}
			got, err := ConvertNetworkPolicy(np)
			if err == nil {
				t.Fatalf("converted %s without an error", show(got))
			}
			if got == nil || got.Name != "bad" || got.Namespace != "prod" {
				t.Fatalf("got %v with the error %v, want the policy as converted", got, err)
			}
			d, err := policy.Compile(&policy.Snapshot{Policies: []*policyapi.NetworkPolicy{got}})
			if err != nil || d.FailedPolicies["prod/bad"] == "" {
				t.Errorf("compile the converted policy: %v, failed %v; want prod/bad to fail closed", err, d.FailedPolicies)
			}
		})
	}
}

// TestTrimKeepsWhatConversionReads: converting the informer's trimmed copy
// gives what converting the full object gives.
func TestTrimKeepsWhatConversionReads(t *testing.T) {
	always := corev1.ContainerRestartPolicyAlways
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "prod", UID: "u", ResourceVersion: "9",
			Labels:        map[string]string{"app": "web"},
			Annotations:   map[string]string{"lockstep.dev/ip": "10.244.1.9", "big": strings.Repeat("x", 1000)},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Spec: corev1.PodSpec{NodeName: "n", HostNetwork: true,
			InitContainers: []corev1.Container{{Name: "side", RestartPolicy: &always, Ports: []corev1.ContainerPort{{Name: "m", ContainerPort: 9}}}},
			Containers:     []corev1.Container{{Name: "c", Image: "img", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 80}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady}}},
	}
	tp := trim(pod.DeepCopy()).(*corev1.Pod)
	if len(tp.ManagedFields) != 0 || len(tp.Status.Conditions) != 0 || tp.Annotations["big"] != "" {
		t.Errorf("trim kept what nothing reads: %s", show(tp))
	}
	for _, node := range []string{"n", "other"} {
		want, err := ConvertPod(pod, node)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ConvertPod(tp, node)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("node %s: trimmed converts to\n%s\nwant\n%s", node, show(got), show(want))
		}
	}

	np := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "np", Namespace: "prod", Annotations: map[string]string{"a": "b"}},
		Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}
	trimmedNP := trim(np.DeepCopy())
	want, _ := ConvertNetworkPolicy(np)
	got, _ := ConvertNetworkPolicy(trimmedNP.(*networkingv1.NetworkPolicy))
	if !reflect.DeepEqual(got, want) {
		t.Errorf("trimmed policy converts to %s, want %s", show(got), show(want))
	}
}
