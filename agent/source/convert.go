package source

import (
	"fmt"
	"maps"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"lockstep.dev/lockstep/agent/policy"
)

// AnnotationPrefix marks the annotations the agent keeps from a Pod (such
// as lockstep.dev/ip, a pinned address). Every other annotation is dropped
// at conversion, and already by the informer's transform: they are often
// large (kubectl's last-applied-configuration) and policy never reads them.
const AnnotationPrefix = "lockstep.dev/"

// ConvertNamespace returns the policy form of ns: its name, UID and labels,
// defaulted as the API server defaults them.
func ConvertNamespace(ns *corev1.Namespace) (*policy.Namespace, error) {
	out := &policy.Namespace{
		TypeMeta:   policy.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: policy.ObjectMeta{Name: ns.Name, UID: string(ns.UID), Labels: copyMap(ns.Labels)},
	}
	out.Default()
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("convert namespace: %w", err)
	}
	return out, nil
}

// ConvertPod returns the policy form of pod as seen by the agent of node:
// labels, lockstep.dev/ annotations, node, hostNetwork, named container
// ports (of containers and restartable init containers, which run for the
// pod's life), phase and addresses.
//
// A pod of another node is known by status.podIPs, which its kubelet
// writes. A pod of this node (spec.nodeName == node) gets no addresses from
// the API: its addresses are the ones this agent's CNI endpoints hold,
// which the compiler adds, and a status written before a sandbox was
// re-created could name addresses the pod no longer has.
func ConvertPod(pod *corev1.Pod, node string) (*policy.Pod, error) {
	out := &policy.Pod{
		TypeMeta: policy.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: policy.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID),
			Labels:      copyMap(pod.Labels),
			Annotations: lockstepAnnotations(pod.Annotations),
		},
		Spec: policy.PodSpec{NodeName: pod.Spec.NodeName, HostNetwork: pod.Spec.HostNetwork},
		Status: policy.PodStatus{
			Phase: policy.PodPhase(pod.Status.Phase),
		},
	}
	for _, c := range pod.Spec.InitContainers {
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			out.Spec.Containers = appendContainer(out.Spec.Containers, c)
		}
	}
	for _, c := range pod.Spec.Containers {
		out.Spec.Containers = appendContainer(out.Spec.Containers, c)
	}
	if node == "" || pod.Spec.NodeName != node {
		out.Status.PodIP = pod.Status.PodIP
		for _, ip := range pod.Status.PodIPs {
			out.Status.PodIPs = append(out.Status.PodIPs, policy.PodIP{IP: ip.IP})
		}
	}
	out.Default()
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("convert pod: %w", err)
	}
	return out, nil
}

// appendContainer appends c when it declares ports; the compiler reads
// nothing else of a container.
func appendContainer(cs []policy.Container, c corev1.Container) []policy.Container {
	if len(c.Ports) == 0 {
		return cs
	}
	pc := policy.Container{Name: c.Name, Ports: make([]policy.ContainerPort, 0, len(c.Ports))}
	for _, p := range c.Ports {
		pc.Ports = append(pc.Ports, policy.ContainerPort{Name: p.Name, ContainerPort: p.ContainerPort, Protocol: policy.Protocol(p.Protocol)})
	}
	return append(cs, pc)
}

// ConvertNetworkPolicy returns the policy form of np, defaulted and
// validated as the compiler will read it. An error means the compiler
// cannot enforce the policy as written (the API server accepts what
// lockstep does not, such as a CIDR with a zone): the policy is still
// returned, and the caller stores it, so that the compiler fails it
// closed for the pods it selects. Leaving it out would leave those pods
// without the isolation it declares.
func ConvertNetworkPolicy(np *networkingv1.NetworkPolicy) (*policy.NetworkPolicy, error) {
	out := &policy.NetworkPolicy{
		TypeMeta:   policy.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: policy.ObjectMeta{Name: np.Name, Namespace: np.Namespace, UID: string(np.UID)},
		Spec:       policy.NetworkPolicySpec{PodSelector: *convertSelector(&np.Spec.PodSelector)},
	}
	for _, r := range np.Spec.Ingress {
		out.Spec.Ingress = append(out.Spec.Ingress, policy.IngressRule{Ports: convertPorts(r.Ports), From: convertPeers(r.From)})
	}
	for _, r := range np.Spec.Egress {
		out.Spec.Egress = append(out.Spec.Egress, policy.EgressRule{Ports: convertPorts(r.Ports), To: convertPeers(r.To)})
	}
	for _, t := range np.Spec.PolicyTypes {
		out.Spec.PolicyTypes = append(out.Spec.PolicyTypes, policy.PolicyType(t))
	}
	out.Default()
	if err := out.Validate(); err != nil {
		return out, fmt.Errorf("convert network policy: %w", err)
	}
	return out, nil
}

func convertPorts(in []networkingv1.NetworkPolicyPort) []policy.NetworkPolicyPort {
	if len(in) == 0 {
		return nil
	}
	out := make([]policy.NetworkPolicyPort, 0, len(in))
	for _, p := range in {
		var pp policy.NetworkPolicyPort
		if p.Protocol != nil {
			proto := policy.Protocol(*p.Protocol)
			pp.Protocol = &proto
		}
		if p.Port != nil {
			if p.Port.Type == intstr.String {
				pp.Port = policy.FromString(p.Port.StrVal)
			} else {
				pp.Port = policy.FromInt(p.Port.IntVal)
			}
		}
		if p.EndPort != nil {
			end := *p.EndPort
			pp.EndPort = &end
		}
		out = append(out, pp)
	}
	return out
}

func convertPeers(in []networkingv1.NetworkPolicyPeer) []policy.NetworkPolicyPeer {
	if len(in) == 0 {
		return nil
	}
	out := make([]policy.NetworkPolicyPeer, 0, len(in))
	for _, p := range in {
		var pp policy.NetworkPolicyPeer
		pp.PodSelector = convertSelector(p.PodSelector)
		pp.NamespaceSelector = convertSelector(p.NamespaceSelector)
		if p.IPBlock != nil {
			pp.IPBlock = &policy.IPBlock{CIDR: p.IPBlock.CIDR, Except: append([]string(nil), p.IPBlock.Except...)}
			if len(pp.IPBlock.Except) == 0 {
				pp.IPBlock.Except = nil
			}
		}
		out = append(out, pp)
	}
	return out
}

// convertSelector keeps nil as nil: a peer's missing selector and its
// empty one mean different things.
func convertSelector(in *metav1.LabelSelector) *policy.LabelSelector {
	if in == nil {
		return nil
	}
	out := &policy.LabelSelector{MatchLabels: copyMap(in.MatchLabels)}
	for _, r := range in.MatchExpressions {
		out.MatchExpressions = append(out.MatchExpressions, policy.LabelSelectorRequirement{
			Key:      r.Key,
			Operator: policy.LabelSelectorOperator(r.Operator),
			Values:   append([]string(nil), r.Values...),
		})
	}
	for i := range out.MatchExpressions {
		if len(out.MatchExpressions[i].Values) == 0 {
			out.MatchExpressions[i].Values = nil
		}
	}
	return out
}

// lockstepAnnotations returns the annotations under AnnotationPrefix, or
// nil.
func lockstepAnnotations(in map[string]string) map[string]string {
	var out map[string]string
	for k, v := range in {
		if strings.HasPrefix(k, AnnotationPrefix) {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// copyMap returns a copy of m, nil when m is empty, so that equal objects
// compare equal whichever way the API server spelled "no labels".
func copyMap(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

// ConvertService returns the policy form of svc: what a dataplane needs to
// translate it (type, ClusterIPs, ports with their target ports, session
// affinity) and the selector, defaulted and validated as the compiler will
// read it. An error means the compiler would refuse the Service; the
// caller leaves it out.
func ConvertService(svc *corev1.Service) (*policy.Service, error) {
	out := &policy.Service{
		TypeMeta:   policy.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: policy.ObjectMeta{Name: svc.Name, Namespace: svc.Namespace, UID: string(svc.UID)},
		Spec: policy.ServiceSpec{
			Type:            policy.ServiceType(svc.Spec.Type),
			ClusterIP:       svc.Spec.ClusterIP,
			ClusterIPs:      append([]string(nil), svc.Spec.ClusterIPs...),
			Selector:        copyMap(svc.Spec.Selector),
			SessionAffinity: policy.ServiceAffinity(svc.Spec.SessionAffinity),
		},
	}
	if len(out.Spec.ClusterIPs) == 0 {
		out.Spec.ClusterIPs = nil
	}
	for _, p := range svc.Spec.Ports {
		sp := policy.ServicePort{Name: p.Name, Protocol: policy.Protocol(p.Protocol), Port: p.Port}
		switch {
		case p.TargetPort.Type == intstr.String:
			sp.TargetPort = policy.FromString(p.TargetPort.StrVal)
		case p.TargetPort.IntVal != 0:
			sp.TargetPort = policy.FromInt(p.TargetPort.IntVal)
		}
		out.Spec.Ports = append(out.Spec.Ports, sp)
	}
	if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		out.Spec.SessionAffinityConfig = &policy.SessionAffinityConfig{ClientIP: &policy.ClientIPConfig{}}
		if t := c.ClientIP.TimeoutSeconds; t != nil {
			v := *t
			out.Spec.SessionAffinityConfig.ClientIP.TimeoutSeconds = &v
		}
	}
	out.Default()
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("convert service: %w", err)
	}
	return out, nil
}

// ConvertEndpointSlice returns the policy form of s: its Service (the
// kubernetes.io/service-name label, the only label kept), address type,
// endpoints with their addresses and ready, serving and terminating
// conditions, and ports. Node names, zones, hints and target references
// are dropped: the dataplane translates to every endpoint of the cluster.
func ConvertEndpointSlice(s *discoveryv1.EndpointSlice) (*policy.EndpointSlice, error) {
	out := &policy.EndpointSlice{
		TypeMeta:    policy.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta:  policy.ObjectMeta{Name: s.Name, Namespace: s.Namespace, UID: string(s.UID), Labels: serviceNameLabel(s.Labels)},
		AddressType: policy.AddressType(s.AddressType),
	}
	for _, e := range s.Endpoints {
		out.Endpoints = append(out.Endpoints, policy.SliceEndpoint{
			Addresses: append([]string(nil), e.Addresses...),
			Conditions: policy.EndpointConditions{
				Ready: copyPtr(e.Conditions.Ready), Serving: copyPtr(e.Conditions.Serving), Terminating: copyPtr(e.Conditions.Terminating),
			},
		})
	}
	for _, p := range s.Ports {
		ep := policy.EndpointSlicePort{Name: copyPtr(p.Name), Port: copyPtr(p.Port)}
		if p.Protocol != nil {
			proto := policy.Protocol(*p.Protocol)
			ep.Protocol = &proto
		}
		out.Ports = append(out.Ports, ep)
	}
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("convert endpointslice: %w", err)
	}
	return out, nil
}

// serviceNameLabel returns the kubernetes.io/service-name label of labels
// alone, or nil.
func serviceNameLabel(labels map[string]string) map[string]string {
	name, ok := labels[policy.ServiceNameLabel]
	if !ok {
		return nil
	}
	return map[string]string{policy.ServiceNameLabel: name}
}

// copyPtr returns a pointer to a copy of *p, or nil.
func copyPtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
