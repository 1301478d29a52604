package source

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// codecs serialises core/v1 and networking.k8s.io/v1, the only built-in
// groups the source reads. The scheme is built on first use rather than
// taken from k8s.io/client-go/kubernetes/scheme, whose initialiser
// registers every API group of Kubernetes: lockstep is one binary, and the
// CNI plugin it also is pays for every package initialiser on each pod ADD
// (see cmd/lockstep/deps_test.go).
var codecs = sync.OnceValue(func() serializer.CodecFactory {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, networkingv1.AddToScheme} {
		if err := add(s); err != nil {
			// AddToScheme only registers types: failing is a programming
			// error.
			panic(fmt.Sprintf("register built-in API types: %v", err))
		}
	}
	return serializer.NewCodecFactory(s)
})

// restClient returns a REST client for one built-in group version: core
// ("" under /api) or a named group under /apis.
func restClient(cfg *rest.Config, gv schema.GroupVersion) (rest.Interface, error) {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	if gv.Group == "" {
		c.APIPath = "/api"
	}
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	c.NegotiatedSerializer = codecs().WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc, err := rest.RESTClientFor(c)
	if err != nil {
		return nil, fmt.Errorf("create %s client for %s: %w", gv, cfg.Host, err)
	}
	return rc, nil
}

// listWatch lists and watches resource (plural, as in the URL) across all
// namespaces, or cluster-wide for a cluster-scoped resource.
func listWatch(c rest.Interface, resource string) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			obj, err := c.Get().
				Resource(resource).
				VersionedParams(&opts, metav1.ParameterCodec).
				Timeout(timeout(opts)).
				Do(ctx).
				Get()
			if err != nil {
				return nil, fmt.Errorf("list %s: %w", resource, err)
			}
			return obj, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.Watch = true
			w, err := c.Get().
				Resource(resource).
				VersionedParams(&opts, metav1.ParameterCodec).
				Timeout(timeout(opts)).
				Watch(ctx)
			if err != nil {
				return nil, fmt.Errorf("watch %s: %w", resource, err)
			}
			return w, nil
		},
	}
}

func timeout(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}
