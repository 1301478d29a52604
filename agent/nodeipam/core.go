package nodeipam

import (
	"context"
	"fmt"
	"net/netip"

	"lockstep.dev/lockstep/agent/endpoints"
	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	"lockstep.dev/lockstep/kube/api/fields"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/runtime"
	"lockstep.dev/lockstep/kube/api/watch"
	"lockstep.dev/lockstep/kube/client"
)

// coreListWatch lists and watches one cluster-wide core resource (nodes,
// or pods in all namespaces) narrowed by a field selector.
func coreListWatch(c client.Interface, resource string, selector fields.Selector) client.ListWatch {
	return client.ListWatch{
		Resource: resource,
		List: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector.String()
			obj, err := c.Get().Resource(resource).VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Get()
			if err != nil {
				return nil, fmt.Errorf("list %s: %w", resource, err)
			}
			return obj, nil
		},
		Watch: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.FieldSelector = selector.String()
			opts.Watch = true
			w, err := c.Get().Resource(resource).VersionedParams(&opts, metav1.ParameterCodec).Watch(ctx)
			if err != nil {
				return nil, fmt.Errorf("watch %s: %w", resource, err)
			}
			return w, nil
		},
	}
}

// nodeSelector selects the Node called name.
func nodeSelector(name string) fields.Selector {
	return fields.OneTermEqualSelector("metadata.name", name)
}

// podSelector selects the pods bound to the node called name.
func podSelector(node string) fields.Selector {
	return fields.OneTermEqualSelector("spec.nodeName", node)
}

// listPodsConsistent lists the pods bound to node with a consistent read
// (no resourceVersion: the API server answers with the current state, not
// with a cache that may lag), which is what lets the orphan reconcile
// trust that a pod missing from it is gone.
func listPodsConsistent(ctx context.Context, c client.Interface, node string) (*corev1.PodList, error) {
	opts := metav1.ListOptions{FieldSelector: podSelector(node).String()}
	list := &corev1.PodList{}
	err := c.Get().Resource("pods").VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(list)
	if err != nil {
		return nil, fmt.Errorf("list pods on node %s: %w", node, err)
	}
	return list, nil
}

// podOf converts a pod to what endpoints.Orphaned judges.
func podOf(p *corev1.Pod) endpoints.Pod {
	out := endpoints.Pod{
		Namespace: p.Namespace, Name: p.Name, UID: string(p.UID),
		Pending: p.Status.Phase == corev1.PodPending,
	}
	ips := p.Status.PodIPs
	if len(ips) == 0 && p.Status.PodIP != "" {
		ips = []corev1.PodIP{{IP: p.Status.PodIP}}
	}
	for _, ip := range ips {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			out.IPs = append(out.IPs, a.Unmap())
		}
	}
	return out
}
