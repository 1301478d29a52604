package client

import (
	"reflect"
	"testing"

	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
)

func TestSlimPod(t *testing.T) {
	full := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u", ResourceVersion: "7",
			Labels: map[string]string{"app": "web"}, Annotations: map[string]string{"a": "b"}},
		Spec: corev1.PodSpec{NodeName: "n1", HostNetwork: true,
			Containers: []corev1.Container{{Name: "c", Image: "i"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1",
			PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}, {IP: "fd00::1"}}, HostIP: "192.0.2.1"},
	}
	want := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u", ResourceVersion: "7"},
		Spec:       corev1.PodSpec{NodeName: "n1", HostNetwork: true},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1",
			PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}, {IP: "fd00::1"}}},
	}
	if got := SlimPod(full); !reflect.DeepEqual(got, want) {
		t.Errorf("SlimPod = %+v, want %+v", got, want)
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	if got := SlimPod(node); got != node {
		t.Errorf("SlimPod changed a Node: %+v", got)
	}
}
