package source

import (
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	discoveryv1 "lockstep.dev/lockstep/kube/api/discovery/v1"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	networkingv1 "lockstep.dev/lockstep/kube/api/networking/v1"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
	"lockstep.dev/lockstep/kube/client"
)

// trim is the informers' transform: it keeps only what conversion and
// routing read, before an object enters an informer's cache. An agent
// caches every pod of the cluster, and a full Pod (managed fields, volumes,
// env, conditions, last-applied annotations) is tens of times larger than
// what policy needs. Objects it does not know pass unchanged.
func trim(obj client.Object) client.Object {
	switch o := obj.(type) {
	case *corev1.Pod:
		return trimPod(o)
	case *corev1.Namespace:
		return &corev1.Namespace{ObjectMeta: trimMeta(&o.ObjectMeta, o.Labels, nil)}
	case *networkingv1.NetworkPolicy:
		return &networkingv1.NetworkPolicy{ObjectMeta: trimMeta(&o.ObjectMeta, nil, nil), Spec: o.Spec}
	case *corev1.Service:
		return &corev1.Service{ObjectMeta: trimMeta(&o.ObjectMeta, oneLabel(o.Labels, policyapi.ServiceProxyNameLabel), nil), Spec: corev1.ServiceSpec{
			Type: o.Spec.Type, ClusterIP: o.Spec.ClusterIP, ClusterIPs: o.Spec.ClusterIPs, Ports: o.Spec.Ports,
			Selector: o.Spec.Selector, SessionAffinity: o.Spec.SessionAffinity, SessionAffinityConfig: o.Spec.SessionAffinityConfig,
			InternalTrafficPolicy: o.Spec.InternalTrafficPolicy, ExternalIPs: o.Spec.ExternalIPs,
			ExternalTrafficPolicy: o.Spec.ExternalTrafficPolicy, LoadBalancerSourceRanges: o.Spec.LoadBalancerSourceRanges,
		}, Status: corev1.ServiceStatus{LoadBalancer: o.Status.LoadBalancer}}
	case *discoveryv1.EndpointSlice:
		return trimEndpointSlice(o)
	case *corev1.Node:
		return &corev1.Node{
			ObjectMeta: trimMeta(&o.ObjectMeta, oneLabel(o.Labels, policyapi.ZoneLabel), nil),
			Status:     corev1.NodeStatus{Addresses: o.Status.Addresses},
		}
	case *v1alpha1.NodeIPAM:
		return &v1alpha1.NodeIPAM{
			ObjectMeta: func() metav1.ObjectMeta {
				m := trimMeta(&o.ObjectMeta, nil, nil)
				m.OwnerReferences = o.OwnerReferences
				return m
			}(),
			Spec: v1alpha1.NodeIPAMSpec{Blocks: o.Spec.Blocks},
		}
	}
	return obj
}

// trimMeta keeps the identity of an object, the given labels and
// annotations.
func trimMeta(m *metav1.ObjectMeta, labels, annotations map[string]string) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		Labels: labels, Annotations: annotations,
	}
}

// trimEndpointSlice keeps the Service a slice belongs to, its address
// type, ports and each endpoint's addresses, conditions, node and hints.
func trimEndpointSlice(s *discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	out := &discoveryv1.EndpointSlice{
		ObjectMeta:  trimMeta(&s.ObjectMeta, oneLabel(s.Labels, policyapi.ServiceNameLabel), nil),
		AddressType: s.AddressType,
		Ports:       s.Ports,
		Endpoints:   make([]discoveryv1.Endpoint, len(s.Endpoints)),
	}
	for i, e := range s.Endpoints {
		out.Endpoints[i] = discoveryv1.Endpoint{Addresses: e.Addresses, Conditions: e.Conditions, NodeName: e.NodeName, Hints: e.Hints}
	}
	return out
}

func trimPod(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{
		ObjectMeta: trimMeta(&p.ObjectMeta, p.Labels, lockstepAnnotations(p.Annotations)),
		Spec:       corev1.PodSpec{NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork},
		Status:     corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs},
	}
	for _, c := range p.Spec.InitContainers {
		if len(c.Ports) > 0 && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			out.Spec.InitContainers = append(out.Spec.InitContainers, corev1.Container{Name: c.Name, Ports: c.Ports, RestartPolicy: c.RestartPolicy})
		}
	}
	for _, c := range p.Spec.Containers {
		if len(c.Ports) > 0 {
			out.Spec.Containers = append(out.Spec.Containers, corev1.Container{Name: c.Name, Ports: c.Ports})
		}
	}
	return out
}
