package client

import (
	"fmt"
	"reflect"
	"sync"

	coordinationv1 "lockstep.dev/lockstep/kube/api/coordination/v1"
	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	discoveryv1 "lockstep.dev/lockstep/kube/api/discovery/v1"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	networkingv1 "lockstep.dev/lockstep/kube/api/networking/v1"
	"lockstep.dev/lockstep/kube/api/runtime"
	"lockstep.dev/lockstep/kube/api/schema"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

// kindTable is the kinds this package encodes and decodes: the type of each
// kind, and the group version and kind of each type. Options (metav1's
// ListOptions, DeleteOptions, ...) belong to every group: they have no
// group here and take the request's.
type kindTable struct {
	types map[schema.GroupVersionKind]reflect.Type
	kinds map[reflect.Type]schema.GroupVersionKind
}

// kinds is built on first use, not at start: the CNI plugin never needs it.
var kinds = sync.OnceValue(func() *kindTable {
	t := &kindTable{types: map[schema.GroupVersionKind]reflect.Type{}, kinds: map[reflect.Type]schema.GroupVersionKind{}}
	add := func(gv schema.GroupVersion, objs ...runtime.Object) {
		for _, obj := range objs {
			typ := reflect.TypeOf(obj).Elem()
			gvk := gv.WithKind(typ.Name())
			t.types[gvk] = typ
			t.kinds[typ] = gvk
		}
	}
	add(corev1.SchemeGroupVersion,
		&corev1.Pod{}, &corev1.PodList{}, &corev1.Namespace{}, &corev1.NamespaceList{},
		&corev1.Node{}, &corev1.NodeList{}, &corev1.Service{}, &corev1.ServiceList{}, &corev1.Event{},
		&metav1.Status{})
	add(networkingv1.SchemeGroupVersion, &networkingv1.NetworkPolicy{}, &networkingv1.NetworkPolicyList{})
	add(discoveryv1.SchemeGroupVersion, &discoveryv1.EndpointSlice{}, &discoveryv1.EndpointSliceList{})
	add(coordinationv1.SchemeGroupVersion, &coordinationv1.Lease{}, &coordinationv1.LeaseList{})
	add(v1alpha1.SchemeGroupVersion,
		&v1alpha1.IPPool{}, &v1alpha1.IPPoolList{}, &v1alpha1.NodeIPAM{}, &v1alpha1.NodeIPAMList{})
	add(schema.GroupVersion{},
		&metav1.ListOptions{}, &metav1.GetOptions{}, &metav1.CreateOptions{}, &metav1.UpdateOptions{}, &metav1.DeleteOptions{})
	return t
})

// kindOf returns the kind of obj, and false for a type this package does
// not know. An option's kind has no version: it takes the request's.
func kindOf(obj runtime.Object) (schema.GroupVersionKind, bool) {
	gvk, ok := kinds().kinds[reflect.TypeOf(obj).Elem()]
	return gvk, ok
}

// newObject returns a new, empty object of kind gvk.
func newObject(gvk schema.GroupVersionKind) (runtime.Object, error) {
	typ, ok := kinds().types[gvk]
	if !ok {
		return nil, fmt.Errorf("no type is known for kind %q of %q", gvk.Kind, gvk.GroupVersion())
	}
	return reflect.New(typ).Interface().(runtime.Object), nil
}

// withKind returns a shallow copy of obj with its apiVersion and kind set
// (the caller's object is not written to).
func withKind(obj runtime.Object, gvk schema.GroupVersionKind) runtime.Object {
	v := reflect.New(reflect.TypeOf(obj).Elem())
	v.Elem().Set(reflect.ValueOf(obj).Elem())
	out := v.Interface().(runtime.Object)
	out.GetObjectKind().SetGroupVersionKind(gvk)
	return out
}
