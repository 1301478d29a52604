package nodeipam

import (
	"context"
	"fmt"
	"net/netip"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"lockstep.dev/lockstep/agent/endpoints"
)

// coreCodecs serialises core/v1, built on first use rather than taken from
// k8s.io/client-go/kubernetes/scheme, whose initialiser registers every API
// group: lockstep is one binary, and the CNI plugin it also is pays for
// every package initialiser on each pod ADD (cmd/lockstep/deps_test.go).
var coreCodecs = sync.OnceValue(func() serializer.CodecFactory {
	s := runtime.NewScheme()
	if err := corev1.AddToScheme(s); err != nil {
		// AddToScheme only registers types: failing is a programming error.
		panic(fmt.Sprintf("register core/v1: %v", err))
	}
	return serializer.NewCodecFactory(s)
})

// newCoreClient returns a REST client for core/v1 on the API server cfg
// describes: the Node the agent runs on and the pods bound to it.
func newCoreClient(cfg *rest.Config) (rest.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &corev1.SchemeGroupVersion
	c.APIPath = "/api"
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	c.NegotiatedSerializer = coreCodecs().WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("create core/v1 client for %s: %w", cfg.Host, err)
	}
	return rc, nil
}

// coreListWatch lists and watches one cluster-wide core resource (nodes,
// or pods in all namespaces) narrowed by a field selector.
func coreListWatch(c rest.Interface, resource string, selector fields.Selector) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.FieldSelector = selector.String()
			obj, err := c.Get().Resource(resource).VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Get()
			if err != nil {
				return nil, fmt.Errorf("list %s: %w", resource, err)
			}
			return obj, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
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
func listPodsConsistent(ctx context.Context, c rest.Interface, node string) (*corev1.PodList, error) {
	opts := metav1.ListOptions{FieldSelector: podSelector(node).String()}
	list := &corev1.PodList{}
	err := c.Get().Resource("pods").VersionedParams(&opts, metav1.ParameterCodec).Do(ctx).Into(list)
	if err != nil {
		return nil, fmt.Errorf("list pods on node %s: %w", node, err)
	}
	return list, nil
}

// slimPod keeps of a pod what the orphan reconcile reads, so the informer
// cache holds a few strings per pod rather than whole specs.
func slimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a cache.DeletedFinalStateUnknown passes through
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: p.Namespace, Name: p.Name, UID: p.UID,
			ResourceVersion: p.ResourceVersion,
		},
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName},
		Status: corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs},
	}, nil
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
