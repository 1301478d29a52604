package source

import (
	"context"
	"fmt"
	"time"

	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/runtime"
	"lockstep.dev/lockstep/kube/api/watch"
	"lockstep.dev/lockstep/kube/client"
)

// listWatch lists and watches resource (plural, as in the URL) across all
// namespaces, or cluster-wide for a cluster-scoped resource.
func listWatch(c client.Interface, resource string) client.ListWatch {
	return client.ListWatch{
		Resource: resource,
		List: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
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
		Watch: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
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
