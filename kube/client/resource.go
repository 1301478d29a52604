package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/runtime"
	"lockstep.dev/lockstep/kube/api/watch"
)

// ErrNoResourceVersion is returned by Update and UpdateStatus for an object
// without metadata.resourceVersion. Read the object first (Get, or an
// informer's cache) and modify that copy: the write then fails with a 409
// Conflict if someone else changed it in between, instead of silently
// undoing their change.
var ErrNoResourceVersion = errors.New("object has no resourceVersion; update a copy of an object read from the API server")

// Object is a pointer to a Kubernetes object with metadata: what Resource
// handles (*v1alpha1.IPPool, *v1alpha1.NodeIPAM) and what an Informer
// caches (those, and built-in objects such as *corev1.Node).
type Object interface {
	runtime.Object
	metav1.Object
}

// Resource is the client for one cluster-scoped lockstep.dev resource: T is
// its object type, L its list type. Every method takes the context that
// bounds the request.
type Resource[T Object, L runtime.Object] struct {
	client   Interface
	resource string // plural, as in the URL
	kind     string // lower-case singular, for error messages
	newObj   func() T
	newList  func() L
}

// Get returns the object called name.
func (r *Resource[T, L]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	obj := r.newObj()
	err := r.client.Get().
		Resource(r.resource).
		Name(name).
		VersionedParams(&opts, metav1.ParameterCodec).
		Do(ctx).
		Into(obj)
	if err != nil {
		return *new(T), fmt.Errorf("get %s %s: %w", r.kind, name, err)
	}
	return obj, nil
}

// List returns the objects opts selects.
func (r *Resource[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	list := r.newList()
	err := r.client.Get().
		Resource(r.resource).
		VersionedParams(&opts, metav1.ParameterCodec).
		Timeout(timeout(opts)).
		Do(ctx).
		Into(list)
	if err != nil {
		return *new(L), fmt.Errorf("list %ss: %w", r.kind, err)
	}
	return list, nil
}

// Watch streams changes to the objects opts selects, from
// opts.ResourceVersion on.
func (r *Resource[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	w, err := r.client.Get().
		Resource(r.resource).
		VersionedParams(&opts, metav1.ParameterCodec).
		Timeout(timeout(opts)).
		Watch(ctx)
	if err != nil {
		return nil, fmt.Errorf("watch %ss: %w", r.kind, err)
	}
	return w, nil
}

// Create creates obj and returns it as the API server stored it. An
// existing object of the same name fails with AlreadyExists
// (apierrors.IsAlreadyExists).
func (r *Resource[T, L]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	out := r.newObj()
	err := r.client.Post().
		Resource(r.resource).
		VersionedParams(&opts, metav1.ParameterCodec).
		Body(obj).
		Do(ctx).
		Into(out)
	if err != nil {
		return *new(T), fmt.Errorf("create %s %s: %w", r.kind, obj.GetName(), err)
	}
	return out, nil
}

// Update replaces obj's metadata and spec; the API server ignores status.
// It succeeds only if obj's resourceVersion is still current, and fails
// with a Conflict (apierrors.IsConflict) otherwise: re-read and decide
// again. It refuses an object without a resourceVersion
// (ErrNoResourceVersion).
func (r *Resource[T, L]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	return r.put(ctx, obj, opts, "")
}

// UpdateStatus replaces obj's status; the API server ignores everything
// else. The resourceVersion rules of Update apply.
func (r *Resource[T, L]) UpdateStatus(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	return r.put(ctx, obj, opts, "status")
}

func (r *Resource[T, L]) put(ctx context.Context, obj T, opts metav1.UpdateOptions, subresource string) (T, error) {
	action := "update " + r.kind
	if subresource != "" {
		action += " " + subresource
	}
	if obj.GetResourceVersion() == "" {
		return *new(T), fmt.Errorf("%s %s: %w", action, obj.GetName(), ErrNoResourceVersion)
	}
	req := r.client.Put().
		Resource(r.resource).
		Name(obj.GetName())
	if subresource != "" {
		req = req.SubResource(subresource)
	}
	out := r.newObj()
	err := req.VersionedParams(&opts, metav1.ParameterCodec).
		Body(obj).
		Do(ctx).
		Into(out)
	if err != nil {
		return *new(T), fmt.Errorf("%s %s: %w", action, obj.GetName(), err)
	}
	return out, nil
}

// Delete deletes the object called name. To delete only the very object
// you read, and never a replacement created under the same name since,
// set opts.Preconditions (metav1.NewUIDPreconditions, or a resourceVersion
// too); a mismatch fails with a Conflict.
func (r *Resource[T, L]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	err := r.client.Delete().
		Resource(r.resource).
		Name(name).
		Body(&opts).
		Do(ctx).
		Error()
	if err != nil {
		return fmt.Errorf("delete %s %s: %w", r.kind, name, err)
	}
	return nil
}

func timeout(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}
