package agent

import (
	"context"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/api"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/store"
)

// TestWaitForPodHoldsTheADDUntilThePodIsKnown: in Kubernetes mode an ADD
// whose Pod object has not arrived yet waits for it rather than start a
// pod no policy can select, and gives up with "try again later".
func TestWaitForPodHoldsTheADDUntilThePodIsKnown(t *testing.T) {
	st, err := store.New()
	if err != nil {
		t.Fatal(err)
	}
	write := func(fn func(*store.Txn) error) {
		t.Helper()
		if err := st.Update(fn); err != nil {
			t.Fatal(err)
		}
	}
	write(func(txn *store.Txn) error {
		for _, e := range []*store.Endpoint{
			{Attachment: store.Attachment{ContainerID: "c1", IfName: "eth0"}, HostIfName: "lsknown", Pod: store.PodRef{Namespace: "prod", Name: "web"}, State: store.EndpointPending},
			{Attachment: store.Attachment{ContainerID: "c2", IfName: "eth0"}, HostIfName: "lsplain", State: store.EndpointPending},
			{Attachment: store.Attachment{ContainerID: "c3", IfName: "eth0"}, HostIfName: "lslate", Pod: store.PodRef{Namespace: "prod", Name: "late"}, State: store.EndpointPending},
			{Attachment: store.Attachment{ContainerID: "c4", IfName: "eth0"}, HostIfName: "lsnever", Pod: store.PodRef{Namespace: "prod", Name: "never"}, State: store.EndpointPending},
		} {
			if err := store.AttachEndpoint(txn, e); err != nil {
				return err
			}
		}
		return store.UpsertPod(txn, &policyapi.Pod{ObjectMeta: policyapi.ObjectMeta{Namespace: "prod", Name: "web"}})
	})
	ctx := context.Background()

	for _, hostIf := range []string{"lsknown", "lsplain", "lsgone"} {
		if err := waitForPod(ctx, st, hostIf, PodObjectWait); err != nil {
			t.Errorf("%s: %v, want no wait", hostIf, err)
		}
	}

	// The pod arrives while the ADD waits.
	done := make(chan error, 1)
	go func() { done <- waitForPod(ctx, st, "lslate", PodObjectWait) }()
	write(func(txn *store.Txn) error {
		return store.UpsertPod(txn, &policyapi.Pod{ObjectMeta: policyapi.ObjectMeta{Namespace: "prod", Name: "late"}})
	})
	if err := <-done; err != nil {
		t.Errorf("lslate: %v after its pod arrived", err)
	}

	// It never does: the ADD gives up so the runtime retries.
	if err := waitForPod(ctx, st, "lsnever", 50*time.Millisecond); api.CodeOf(err) != api.CodeTryAgainLater {
		t.Errorf("lsnever: %v, want code %d", err, api.CodeTryAgainLater)
	}
}
