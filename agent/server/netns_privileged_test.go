//go:build linux

package server

import (
	"context"
	"testing"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/probe/nodesim"
	"lockstep.dev/lockstep/test/testenv"
)

// TestPrivilegedPodNetnsIsAccepted: a pod's network namespace passes the
// server's check, reaches the backend, and is closed after the call.
func TestPrivilegedPodNetnsIsAccepted(t *testing.T) {
	testenv.Privileged(t)
	pod, err := nodesim.Create(nodesim.Name("lssrv"))
	if err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	t.Cleanup(func() {
		if err := nodesim.Delete(pod); err != nil {
			t.Errorf("delete namespace: %v", err)
		}
	})
	c := api.NewClient(serve(t, &fakeBackend{}), 0)
	defer c.Close()
	if _, err := c.Status(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := openFDs(t)
	f := open(t, pod.Path())
	resp, err := c.CNIAdd(context.Background(), api.CNIAddRequest{Attachment: api.Attachment{ContainerID: "c", IfName: "eth0"}}, f)
	f.Close()
	if err != nil {
		t.Fatalf("CNIAdd with a pod namespace: %v", err)
	}
	if resp.PodIf.Name != "pod netns" {
		t.Fatalf("backend got %q, want the passed namespace", resp.PodIf.Name)
	}
	if after := openFDs(t); after != before {
		t.Fatalf("the process holds %d descriptors after the request, %d before: the server kept the namespace", after, before)
	}
}
