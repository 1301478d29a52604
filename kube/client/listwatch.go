package client

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// ListWatch returns the list and watch functions an informer or reflector
// runs on r. tweak, if not nil, narrows every list and watch, for example
// with a label selector.
func (r *Resource[T, L]) ListWatch(tweak func(*metav1.ListOptions)) *cache.ListWatch {
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			if tweak != nil {
				tweak(&opts)
			}
			return r.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
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
func (r *Resource[T, L]) ListWatchName(name string) *cache.ListWatch {
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	return r.ListWatch(func(opts *metav1.ListOptions) {
		opts.FieldSelector = selector
	})
}

// Informer returns a shared informer on lw for r's objects; resync 0
// disables periodic resyncs. Add handlers, then Run it.
func (r *Resource[T, L]) Informer(lw *cache.ListWatch, resync time.Duration) cache.SharedIndexInformer {
	return cache.NewSharedIndexInformer(lw, r.newObj(), resync, cache.Indexers{})
}
