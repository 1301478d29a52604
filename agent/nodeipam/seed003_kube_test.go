package nodeipam

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/store"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

// TestKubeSeed003NodeReplacedUnderSameName replays Azure CNS's stale
// NodeNetworkConfig: a Node is deleted and re-created under the same name
// while its old NodeIPAM still exists (the garbage collector lags; here
// it never runs), and the operator then hands the same block out again in
// a new NodeIPAM. The agent, restarted on the new Node or running across
// the replacement, never reads the stale object (no pass gets past
// verification with it, and its status is never written), allocates from
// no block while only the stale object exists, comes up on the
// replacement, and allocates from the re-assigned block without handing
// out an address a previous pod still holds.
func TestKubeSeed003NodeReplacedUnderSameName(t *testing.T) {
	c := startCluster(t)
	const reused, dropped = "10.244.1.0/29", "10.244.2.0/29"
	tests := []struct {
		name    string
		restart bool
	}{
		{"agent restarts on the new Node", true},
		{"agent runs across the replacement", false},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodeName := fmt.Sprintf("node-replaced-%d", i)
			dir := t.TempDir()
			oldUID := c.createNode(t, nodeName)
			stale := c.createNodeIPAM(t, nodeName, oldUID, reused, dropped)

			// Every NodeIPAM a pass of any incarnation of the agent got
			// past verification with.
			var mu sync.Mutex
			used := map[string]bool{}
			waits := make(chan string, 16)
			h := hooks{
				afterRead: func(obj *v1alpha1.NodeIPAM) {
					mu.Lock()
					used[string(obj.UID)] = true
					mu.Unlock()
				},
				waiting: func(why string) {
					select {
					case waits <- why:
					default:
					}
				},
			}
			a := c.startAgent(t, dir, nodeName, h, nil)
			a.ready(t)
			gone, goneAddr := c.startPod(t, a, nodeName+"-web-0", nodeName)
			if !netip.MustParsePrefix(reused).Contains(goneAddr) {
				t.Fatalf("first pod got %s, want an address of %s", goneAddr, reused)
			}
			c.answered(t, nodeName)
			mu.Lock()
			if !used[string(stale.UID)] {
				t.Fatal("setup: the agent never used the first NodeIPAM")
			}
			mu.Unlock()

			// The node is replaced. Its pod goes with it (pod GC), without
			// a CNI DEL; its NodeIPAM stays.
			if tc.restart {
				// The new incarnation must never use the stale object.
				a.stop()
				mu.Lock()
				clear(used)
				mu.Unlock()
			}
			c.deleteNode(t, nodeName)
			c.deletePod(t, gone)
			newUID := c.createNode(t, nodeName)
			staleRV := c.nodeIPAM(t, nodeName).ResourceVersion
			if tc.restart {
				a = c.startAgent(t, dir, nodeName, h, func(o *Options) { o.OrphanInterval = 50 * time.Millisecond })
			}
			var why string
		wait:
			for {
				select {
				case why = <-waits:
					if strings.Contains(why, "left over from a deleted Node") {
						break wait
					}
				case <-time.After(90 * time.Second):
					t.Fatal("the agent never said it waits for the stale NodeIPAM to be replaced")
				}
			}
			if !strings.Contains(why, string(stale.UID)) || !strings.Contains(why, string(newUID)) {
				t.Errorf("the wait does not name the objects: %s", why)
			}
			if !tc.restart {
				// From here on the agent has seen the replacement: no pass
				// may get past verification with the stale object. (Until
				// it saw the deletion, a pass of the old Node's, such as
				// the one its own status write triggers, may still use it.)
				mu.Lock()
				clear(used)
				mu.Unlock()
			}
			// While only the stale object exists nothing is allocated.
			late := c.createPod(t, nodeName+"-web-1", nodeName)
			if addr, err := a.add(t, "sandbox-web-1-early", late); api.CodeOf(err) != api.CodePoolExhausted {
				t.Fatalf("ADD while only the stale NodeIPAM exists: %v, %v; want refused", addr, err)
			}
			if tc.restart {
				ctx, cancel := context.WithCancel(t.Context())
				cancel()
				if err := a.syncer.WaitReady(ctx); err == nil || !strings.Contains(err.Error(), "left over") {
					t.Errorf("WaitReady with only the stale NodeIPAM: %v", err)
				}
			}

			// The operator replaces the stale object: a delete that can
			// only hit that very object, and a new one with the same block.
			if got := c.nodeIPAM(t, nodeName); got.ResourceVersion != staleRV || got.UID != stale.UID {
				t.Fatalf("the stale NodeIPAM was written while the agent waited: %+v", got.Status)
			}
			if err := c.ipams.Delete(t.Context(), nodeName, metav1.DeleteOptions{Preconditions: metav1.NewUIDPreconditions(string(stale.UID))}); err != nil {
				t.Fatal(err)
			}
			fresh := c.createNodeIPAM(t, nodeName, newUID, reused)
			a.ready(t)
			n := c.answered(t, nodeName)

			mu.Lock()
			if used[string(stale.UID)] {
				t.Error("the agent used the stale NodeIPAM after its Node was replaced")
			}
			mu.Unlock()
			if b := a.block(t, reused); b == nil || b.Owner != string(fresh.UID) || b.State != store.BlockActive {
				t.Fatalf("block %s: %+v, want active, owned by the new NodeIPAM %s", reused, b, fresh.UID)
			}
			if b := a.block(t, dropped); b != nil {
				t.Fatalf("block %s of the stale NodeIPAM is still held: %+v", dropped, b)
			}
			if len(n.Status.Blocks) != 1 || string(n.Status.Blocks[0].CIDR) != reused {
				t.Errorf("usage reported on the new NodeIPAM: %+v", n.Status.Blocks)
			}

			// Allocation works, and never hands out an address an endpoint
			// still holds (allocated fails on an address held twice).
			addr := a.mustAdd(t, "sandbox-web-1", late)
			c.podRunning(t, late, addr)
			if held := a.allocated(t); !netip.MustParsePrefix(reused).Contains(addr) || held[addr] != late.uid {
				t.Fatalf("ADD on the new NodeIPAM got %s; held: %v", addr, held)
			}
			// web-0's endpoint goes once its pod is known to be gone.
			eventually(t, "web-0's address is freed once its pod is gone", func() (bool, string) {
				if _, err := a.syncer.reconcileOrphans(t.Context()); err != nil {
					return false, err.Error()
				}
				for _, uid := range a.allocated(t) {
					if uid == gone.uid {
						return false, fmt.Sprint(a.allocated(t))
					}
				}
				return true, ""
			})
			if a.allocated(t)[addr] != late.uid {
				t.Fatalf("the live pod lost %s", addr)
			}
		})
	}
}
