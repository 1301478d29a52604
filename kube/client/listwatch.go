package client

import (
	"context"

	"lockstep.dev/lockstep/kube/api/fields"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/runtime"
	"lockstep.dev/lockstep/kube/api/watch"
)

// ListWatch returns the list and watch functions an Informer runs on r.
// tweak, if not nil, narrows every list and watch, for example with a
// label selector.
func (r *Resource[T, L]) ListWatch(tweak func(*metav1.ListOptions)) ListWatch {
	return ListWatch{
		Resource: r.resource,
		List: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			if tweak != nil {
				tweak(&opts)
			}
			return r.List(ctx, opts)
		},
		Watch: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			if tweak != nil {
				tweak(&opts)
			}
			return r.Watch(ctx, opts)
		},
	}
}

// ListWatchName is ListWatch narrowed to the one object called name, with a
// metadata.name field selector: how an agent follows its own node's
// NodeIPAM without receiving every other node's.
func (r *Resource[T, L]) ListWatchName(name string) ListWatch {
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	return r.ListWatch(func(opts *metav1.ListOptions) {
		opts.FieldSelector = selector
	})
}
