package client

import (
	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
)

// SlimPod is an Informer transform (SetTransform) for pods whose readers
// need only where a pod runs and which addresses it holds: the node's
// orphan reconcile and the operator's release check. It keeps the
// identity, the node, hostNetwork, the phase and the pod IPs, so the
// cache of a large cluster's pods holds a few strings per pod rather than
// whole specs. Other objects pass unchanged.
func SlimPod(obj Object) Object {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: p.Namespace, Name: p.Name, UID: p.UID,
			ResourceVersion: p.ResourceVersion,
		},
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork},
		Status: corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs},
	}
}
