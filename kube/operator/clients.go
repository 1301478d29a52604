package operator

import (
	"context"
	"fmt"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"lockstep.dev/lockstep/kube/client"
)

// codecs serialises the two built-in groups the operator uses: core/v1
// (Nodes) and coordination.k8s.io/v1 (the leader election Lease). It is
// built on first use rather than taken from client-go's generated
// clientset, whose scheme registers every API group in an initialiser that
// every lockstep-cni exec would run (cmd/lockstep/deps_test.go).
var codecs = sync.OnceValue(func() serializer.CodecFactory {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{corev1.AddToScheme, coordinationv1.AddToScheme} {
		if err := add(s); err != nil {
			// AddToScheme only registers types: failing is a programming
			// error.
			panic(fmt.Sprintf("register built-in API types: %v", err))
		}
	}
	return serializer.NewCodecFactory(s)
})

// clients are the operator's connections to the API server.
type clients struct {
	lockstep *client.Client
	core     rest.Interface // core/v1
	leases   rest.Interface // coordination.k8s.io/v1
}

// Client-side rate limits when the configuration sets none; client-go's
// own defaults (5 and 10) would make a new cluster of a thousand nodes
// wait minutes for its first blocks.
const (
	defaultQPS   = 50
	defaultBurst = 100
)

func newClients(cfg *rest.Config) (*clients, error) {
	if cfg.QPS == 0 && cfg.RateLimiter == nil {
		cfg = rest.CopyConfig(cfg)
		cfg.QPS, cfg.Burst = defaultQPS, defaultBurst
	}
	ls, err := client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	core, err := restClient(cfg, corev1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	leases, err := restClient(cfg, coordinationv1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	return &clients{lockstep: ls, core: core, leases: leases}, nil
}

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

// getNode reads one Node from the API server, not from a cache.
func (c *clients) getNode(ctx context.Context, name string) (*corev1.Node, error) {
	n := new(corev1.Node)
	if err := c.core.Get().Resource("nodes").Name(name).Do(ctx).Into(n); err != nil {
		return nil, fmt.Errorf("get node %s: %w", name, err)
	}
	return n, nil
}

// nodeListWatch lists and watches Nodes.
func (c *clients) nodeListWatch() *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list := new(corev1.NodeList)
			err := c.core.Get().Resource("nodes").
				VersionedParams(&opts, metav1.ParameterCodec).
				Timeout(timeout(opts)).
				Do(ctx).Into(list)
			if err != nil {
				return nil, fmt.Errorf("list nodes: %w", err)
			}
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.Watch = true
			w, err := c.core.Get().Resource("nodes").
				VersionedParams(&opts, metav1.ParameterCodec).
				Timeout(timeout(opts)).
				Watch(ctx)
			if err != nil {
				return nil, fmt.Errorf("watch nodes: %w", err)
			}
			return w, nil
		},
	}
}

// trimNode keeps of a Node what the operator reads, its identity, so that
// a large cluster's node statuses are not cached.
func trimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil // a tombstone
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:              n.Name,
		UID:               n.UID,
		ResourceVersion:   n.ResourceVersion,
		DeletionTimestamp: n.DeletionTimestamp,
	}}, nil
}

func timeout(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}
