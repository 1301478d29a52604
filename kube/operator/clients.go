package operator

import (
	"context"
	"fmt"
	"time"

	coordinationv1 "lockstep.dev/lockstep/kube/api/coordination/v1"
	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/runtime"
	"lockstep.dev/lockstep/kube/api/watch"
	"lockstep.dev/lockstep/kube/client"
)

// clients are the operator's connections to the API server.
type clients struct {
	lockstep *client.Client
	core     client.Interface // core/v1
	leases   client.Interface // coordination.k8s.io/v1
}

// Client-side rate limits when the configuration sets none; client-go's
// own defaults (5 and 10) would make a new cluster of a thousand nodes
// wait minutes for its first blocks.
const (
	defaultQPS   = 50
	defaultBurst = 100
)

func newClients(cfg *client.Config) (*clients, error) {
	if cfg.QPS == 0 {
		cfg = client.CopyConfig(cfg)
		cfg.QPS, cfg.Burst = defaultQPS, defaultBurst
	}
	ls, err := client.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	core, err := client.ForGroup(cfg, corev1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	leases, err := client.ForGroup(cfg, coordinationv1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	return &clients{lockstep: ls, core: core, leases: leases}, nil
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
func (c *clients) nodeListWatch() client.ListWatch {
	return c.coreListWatch("nodes", func() runtime.Object { return new(corev1.NodeList) })
}

// podListWatch lists and watches the pods of every namespace: the
// addresses they hold are what a release is checked against (pods.go).
func (c *clients) podListWatch() client.ListWatch {
	return c.coreListWatch("pods", func() runtime.Object { return new(corev1.PodList) })
}

// coreListWatch lists and watches one cluster-wide resource of core/v1
// into lists made by newList.
func (c *clients) coreListWatch(resource string, newList func() runtime.Object) client.ListWatch {
	return client.ListWatch{
		Resource: resource,
		List: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			list := newList()
			err := c.core.Get().Resource(resource).
				VersionedParams(&opts, metav1.ParameterCodec).
				Timeout(timeout(opts)).
				Do(ctx).Into(list)
			if err != nil {
				return nil, fmt.Errorf("list %s: %w", resource, err)
			}
			return list, nil
		},
		Watch: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.Watch = true
			w, err := c.core.Get().Resource(resource).
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

// trimNode keeps of a Node what the operator reads, its identity, so that
// a large cluster's node statuses are not cached.
func trimNode(obj client.Object) client.Object {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj
	}
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:              n.Name,
		UID:               n.UID,
		ResourceVersion:   n.ResourceVersion,
		DeletionTimestamp: n.DeletionTimestamp,
	}}
}

func timeout(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}
