package source

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	discoveryv1 "lockstep.dev/lockstep/kube/api/discovery/v1"
	"lockstep.dev/lockstep/kube/api/intstr"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	networkingv1 "lockstep.dev/lockstep/kube/api/networking/v1"
)

// AnnotationPrefix marks the annotations the agent keeps from a Pod (such
// as lockstep.dev/ip, a pinned address). Every other annotation is dropped
// at conversion, and already by the informer's transform: they are often
// large (kubectl's last-applied-configuration) and policy never reads them.
const AnnotationPrefix = "lockstep.dev/"

// ConvertNamespace returns the policy form of ns: its name, UID and labels,
// defaulted as the API server defaults them.
func ConvertNamespace(ns *corev1.Namespace) (*policyapi.Namespace, error) {
	out := &policyapi.Namespace{
		TypeMeta:   policyapi.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: policyapi.ObjectMeta{Name: ns.Name, UID: string(ns.UID), Labels: copyMap(ns.Labels)},
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
func ConvertPod(pod *corev1.Pod, node string) (*policyapi.Pod, error) {
	out := &policyapi.Pod{
		TypeMeta: policyapi.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: policyapi.ObjectMeta{
			Name: pod.Name, Namespace: pod.Namespace, UID: string(pod.UID),
			Labels:      copyMap(pod.Labels),
			Annotations: lockstepAnnotations(pod.Annotations),
		},
		Spec: policyapi.PodSpec{NodeName: pod.Spec.NodeName, HostNetwork: pod.Spec.HostNetwork},
		Status: policyapi.PodStatus{
			Phase: policyapi.PodPhase(pod.Status.Phase),
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
			out.Status.PodIPs = append(out.Status.PodIPs, policyapi.PodIP{IP: ip.IP})
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
func appendContainer(cs []policyapi.Container, c corev1.Container) []policyapi.Container {
	if len(c.Ports) == 0 {
		return cs
	}
	pc := policyapi.Container{Name: c.Name, Ports: make([]policyapi.ContainerPort, 0, len(c.Ports))}
	for _, p := range c.Ports {
		pc.Ports = append(pc.Ports, policyapi.ContainerPort{Name: p.Name, ContainerPort: p.ContainerPort, Protocol: policyapi.Protocol(p.Protocol)})
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
func ConvertNetworkPolicy(np *networkingv1.NetworkPolicy) (*policyapi.NetworkPolicy, error) {
	out := &policyapi.NetworkPolicy{
		TypeMeta:   policyapi.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: policyapi.ObjectMeta{Name: np.Name, Namespace: np.Namespace, UID: string(np.UID)},
		Spec:       policyapi.NetworkPolicySpec{PodSelector: *convertSelector(&np.Spec.PodSelector)},
	}
	for _, r := range np.Spec.Ingress {
		out.Spec.Ingress = append(out.Spec.Ingress, policyapi.IngressRule{Ports: convertPorts(r.Ports), From: convertPeers(r.From)})
	}
	for _, r := range np.Spec.Egress {
		out.Spec.Egress = append(out.Spec.Egress, policyapi.EgressRule{Ports: convertPorts(r.Ports), To: convertPeers(r.To)})
	}
	for _, t := range np.Spec.PolicyTypes {
		out.Spec.PolicyTypes = append(out.Spec.PolicyTypes, policyapi.PolicyType(t))
	}
	out.Default()
	if err := out.Validate(); err != nil {
		return out, fmt.Errorf("convert network policy: %w", err)
	}
	return out, nil
}

func convertPorts(in []networkingv1.NetworkPolicyPort) []policyapi.NetworkPolicyPort {
	if len(in) == 0 {
		return nil
	}
	out := make([]policyapi.NetworkPolicyPort, 0, len(in))
	for _, p := range in {
		var pp policyapi.NetworkPolicyPort
		if p.Protocol != nil {
			proto := policyapi.Protocol(*p.Protocol)
			pp.Protocol = &proto
		}
		if p.Port != nil {
			if p.Port.Type == intstr.String {
				pp.Port = policyapi.FromString(p.Port.StrVal)
			} else {
				pp.Port = policyapi.FromInt(p.Port.IntVal)
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

func convertPeers(in []networkingv1.NetworkPolicyPeer) []policyapi.NetworkPolicyPeer {
	if len(in) == 0 {
		return nil
	}
	out := make([]policyapi.NetworkPolicyPeer, 0, len(in))
	for _, p := range in {
		var pp policyapi.NetworkPolicyPeer
		pp.PodSelector = convertSelector(p.PodSelector)
		pp.NamespaceSelector = convertSelector(p.NamespaceSelector)
		if p.IPBlock != nil {
			pp.IPBlock = &policyapi.IPBlock{CIDR: p.IPBlock.CIDR, Except: append([]string(nil), p.IPBlock.Except...)}
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
func convertSelector(in *metav1.LabelSelector) *policyapi.LabelSelector {
	if in == nil {
		return nil
	}
	out := &policyapi.LabelSelector{MatchLabels: copyMap(in.MatchLabels)}
	for _, r := range in.MatchExpressions {
		out.MatchExpressions = append(out.MatchExpressions, policyapi.LabelSelectorRequirement{
			Key:      r.Key,
			Operator: policyapi.LabelSelectorOperator(r.Operator),
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
// translate it (type, ClusterIPs, externalIPs, load-balancer IPs, ports
// with their target ports and NodePorts, session affinity, traffic
// policies and load-balancer source ranges, the ServiceProxyNameLabel
// label alone of its labels) and the selector, defaulted and validated as
// the compiler will read it. An error means the compiler would refuse the
// Service; the caller leaves it out.
func ConvertService(svc *corev1.Service) (*policyapi.Service, error) {
	out := &policyapi.Service{
		TypeMeta: policyapi.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: policyapi.ObjectMeta{Name: svc.Name, Namespace: svc.Namespace, UID: string(svc.UID),
			Labels: oneLabel(svc.Labels, policyapi.ServiceProxyNameLabel)},
		Spec: policyapi.ServiceSpec{
			Type:                     policyapi.ServiceType(svc.Spec.Type),
			ClusterIP:                svc.Spec.ClusterIP,
			ClusterIPs:               append([]string(nil), svc.Spec.ClusterIPs...),
			Selector:                 copyMap(svc.Spec.Selector),
			SessionAffinity:          policyapi.ServiceAffinity(svc.Spec.SessionAffinity),
			ExternalIPs:              slices.Clone(svc.Spec.ExternalIPs),
			ExternalTrafficPolicy:    policyapi.ServiceExternalTrafficPolicy(svc.Spec.ExternalTrafficPolicy),
			LoadBalancerSourceRanges: slices.Clone(svc.Spec.LoadBalancerSourceRanges),
		},
	}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		if in.IP == "" {
			continue
		}
		lb := policyapi.LoadBalancerIngress{IP: in.IP}
		if in.IPMode != nil {
			m := policyapi.LoadBalancerIPMode(*in.IPMode)
			lb.IPMode = &m
		}
		out.Status.LoadBalancer.Ingress = append(out.Status.LoadBalancer.Ingress, lb)
	}
	if len(out.Spec.ClusterIPs) == 0 {
		out.Spec.ClusterIPs = nil
	}
	if p := svc.Spec.InternalTrafficPolicy; p != nil {
		v := policyapi.ServiceInternalTrafficPolicy(*p)
		out.Spec.InternalTrafficPolicy = &v
	}
	for _, p := range svc.Spec.Ports {
		sp := policyapi.ServicePort{Name: p.Name, Protocol: policyapi.Protocol(p.Protocol), Port: p.Port, NodePort: p.NodePort}
		switch {
		case p.TargetPort.Type == intstr.String:
			sp.TargetPort = policyapi.FromString(p.TargetPort.StrVal)
		case p.TargetPort.IntVal != 0:
			sp.TargetPort = policyapi.FromInt(p.TargetPort.IntVal)
		}
		out.Spec.Ports = append(out.Spec.Ports, sp)
	}
	if c := svc.Spec.SessionAffinityConfig; c != nil && c.ClientIP != nil && svc.Spec.SessionAffinity == corev1.ServiceAffinityClientIP {
		out.Spec.SessionAffinityConfig = &policyapi.SessionAffinityConfig{ClientIP: &policyapi.ClientIPConfig{}}
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
// conditions, node names and hints (which translation follows as
// kube-proxy does: see policyapi.EndpointHints), and ports. Zones and
// target references are dropped.
func ConvertEndpointSlice(s *discoveryv1.EndpointSlice) (*policyapi.EndpointSlice, error) {
	out := &policyapi.EndpointSlice{
		TypeMeta:    policyapi.TypeMeta{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"},
		ObjectMeta:  policyapi.ObjectMeta{Name: s.Name, Namespace: s.Namespace, UID: string(s.UID), Labels: oneLabel(s.Labels, policyapi.ServiceNameLabel)},
		AddressType: policyapi.AddressType(s.AddressType),
	}
	for _, e := range s.Endpoints {
		out.Endpoints = append(out.Endpoints, policyapi.SliceEndpoint{
			Addresses: append([]string(nil), e.Addresses...),
			Conditions: policyapi.EndpointConditions{
				Ready: copyPtr(e.Conditions.Ready), Serving: copyPtr(e.Conditions.Serving), Terminating: copyPtr(e.Conditions.Terminating),
			},
			NodeName: copyPtr(e.NodeName),
			Hints:    convertHints(e.Hints),
		})
	}
	for _, p := range s.Ports {
		ep := policyapi.EndpointSlicePort{Name: copyPtr(p.Name), Port: copyPtr(p.Port)}
		if p.Protocol != nil {
			proto := policyapi.Protocol(*p.Protocol)
			ep.Protocol = &proto
		}
		out.Ports = append(out.Ports, ep)
	}
	if err := out.Validate(); err != nil {
		return nil, fmt.Errorf("convert endpointslice: %w", err)
	}
	return out, nil
}

// convertHints returns the policy form of an endpoint's hints, nil for
// none.
func convertHints(h *discoveryv1.EndpointHints) *policyapi.EndpointHints {
	if h == nil || len(h.ForZones) == 0 && len(h.ForNodes) == 0 {
		return nil
	}
	out := &policyapi.EndpointHints{}
	for _, z := range h.ForZones {
		out.ForZones = append(out.ForZones, policyapi.ForZone{Name: z.Name})
	}
	for _, n := range h.ForNodes {
		out.ForNodes = append(out.ForNodes, policyapi.ForNode{Name: n.Name})
	}
	return out
}

// ConvertNode returns what translation needs of a Node: its name, zone
// (the policyapi.ZoneLabel label) and InternalIPs (unmapped, each once, in
// the Node's order; one that does not parse is left out), where pods
// reach its NodePorts. Its ExternalIPs are not among them: often a cloud's
// address the node does not have, where kube-proxy serves no NodePort.
func ConvertNode(n *corev1.Node) *policyapi.Node {
	var internal []string
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			internal = append(internal, a.Address)
		}
	}
	return &policyapi.Node{Name: n.Name, Zone: n.Labels[policyapi.ZoneLabel], Addrs: policyapi.ParseAddrs(internal)}
}

// oneLabel returns the label key of labels alone, or nil.
func oneLabel(labels map[string]string, key string) map[string]string {
	v, ok := labels[key]
	if !ok {
		return nil
	}
	return map[string]string{key: v}
}

// copyPtr returns a pointer to a copy of *p, or nil.
func copyPtr[T any](p *T) *T {
	if p == nil {
		return nil
	}
	v := *p
	return &v
}
