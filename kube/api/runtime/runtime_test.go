package runtime_test

import (
	"reflect"
	"testing"
	"time"

	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/runtime"
)

func TestDeepCopySharesNothing(t *testing.T) {
	ts := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	in := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Labels: map[string]string{"a": "b"}, Annotations: map[string]string{}, DeletionTimestamp: &ts},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Ports: []corev1.ContainerPort{{ContainerPort: 80}}}}, InitContainers: []corev1.Container{}},
		Status:     corev1.PodStatus{PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}}},
	}
	out := in.DeepCopy()
	if !reflect.DeepEqual(in, out) {
		t.Fatalf("copy differs:\n%+v\n%+v", in, out)
	}
	if out.Annotations == nil || out.Spec.InitContainers == nil || out.Finalizers != nil {
		t.Errorf("copy changed nil or empty: annotations %v, init containers %v, finalizers %v", out.Annotations, out.Spec.InitContainers, out.Finalizers)
	}
	out.Labels["a"] = "x"
	out.Spec.Containers[0].Ports[0].ContainerPort = 81
	out.Status.PodIPs[0].IP = "10.0.0.2"
	out.DeletionTimestamp.Time = time.Time{}
	if in.Labels["a"] != "b" || in.Spec.Containers[0].Ports[0].ContainerPort != 80 || in.Status.PodIPs[0].IP != "10.0.0.1" || in.DeletionTimestamp.IsZero() {
		t.Errorf("writing the copy changed the original: %+v", in)
	}
	if (*corev1.Pod)(nil).DeepCopy() != nil {
		t.Error("copy of nil is not nil")
	}
}

func TestExtractList(t *testing.T) {
	list := &corev1.PodList{Items: []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "a"}}, {ObjectMeta: metav1.ObjectMeta{Name: "b"}}}}
	items, err := runtime.ExtractList(list)
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 2 || items[0].(*corev1.Pod).Name != "a" || items[1].(*corev1.Pod).Name != "b" {
		t.Fatalf("ExtractList = %v, want the two items in order", items)
	}
	if items[0] == runtime.Object(&list.Items[0]) {
		t.Error("ExtractList returned a pointer into the list's array, which keeps the whole page alive")
	}
	if _, err := runtime.ExtractList(&corev1.Pod{}); err == nil {
		t.Error("ExtractList of a Pod: no error")
	}
	if _, ok := runtime.Object(list).(runtime.ListMeta); !ok {
		t.Error("a PodList has no ListMeta accessors")
	}
}
