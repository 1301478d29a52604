package nodeipam

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/store"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

// markedB1 reports whether obj marks b1 for release.
func markedB1(obj *v1alpha1.NodeIPAM) bool {
	m := obj.Spec.Mark(b1)
	return m != nil && m.State == v1alpha1.MarkedForRelease
}

// fillB0 starts six pods, which take every address of b0.
func (c *cluster) fillB0(t *testing.T, a *agent, nodeName string) {
	t.Helper()
	for i := range 6 {
		if _, addr := c.startPod(t, a, fmt.Sprintf("%s-filler-%d", nodeName, i), nodeName); !netip.MustParsePrefix(b0).Contains(addr) {
			t.Fatalf("filler got %s, outside %s", addr, b0)
		}
	}
}

// TestKubeSeed004MarkRacesAdd replays Cilium's excess-IP release race
// against a real API server: the operator marks block b1 for release at
// the moment the agent hands out an address from it. b0 is full, so an
// ADD that is not refused lands in b1. A hook stops the agent at each
// point of its handshake and runs the ADD there. Whatever the order, the
// agent never answers ready-for-release while b1 holds an address, never
// allocates from b1 after it answered ready, and the operator, which
// releases only on NodeIPAM.MayRelease, takes b1 back only when it is
// empty.
func TestKubeSeed004MarkRacesAdd(t *testing.T) {
	c := startCluster(t)
	tests := []struct {
		name string
		// at installs the race at its point: it must call race once the
		// agent is there, with the NodeIPAM marked.
		at   func(h *hooks, race func())
		want v1alpha1.ReleaseState
	}{{
		name: "ADD between the agent's read of the mark and its check",
		at: func(h *hooks, race func()) {
			h.afterRead = func(obj *v1alpha1.NodeIPAM) {
				if markedB1(obj) {
					race()
				}
			}
		},
		want: v1alpha1.DoNotRelease,
	}, {
		name: "ADD while the check-and-quarantine transaction is open",
		at: func(h *hooks, race func()) {
			h.inApplyTxn = func(obj *v1alpha1.NodeIPAM) {
				if obj != nil && markedB1(obj) {
					go race() // waits for the store's write lock
				}
			}
		},
		want: v1alpha1.ReadyForRelease,
	}, {
		name: "ADD between the quarantine and the answer",
		at: func(h *hooks, race func()) {
			h.beforeAnswer = func(_ context.Context, obj *v1alpha1.NodeIPAM) error {
				if markedB1(obj) {
					race()
				}
				return nil
			}
		},
		want: v1alpha1.ReadyForRelease,
	}}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodeName := fmt.Sprintf("node-race-%d", i)
			c.createNodeIPAM(t, nodeName, c.createNode(t, nodeName), b0, b1)
			racer := c.createPod(t, nodeName+"-racer", nodeName)

			type result struct {
				addr netip.Addr
				err  error
			}
			raced := make(chan result, 1)
			var a *agent
			var once sync.Once
			var h hooks
			tc.at(&h, func() {
				once.Do(func() {
					addr, err := a.add(t, "sandbox-racer", racer)
					raced <- result{addr, err}
				})
			})
			a = c.startAgent(t, t.TempDir(), nodeName, h, nil)
			a.ready(t)
			c.fillB0(t, a, nodeName)

			c.mark(t, nodeName, b1)
			n := c.answered(t, nodeName)
			var r result
			select {
			case r = <-raced:
			case <-time.After(90 * time.Second):
				t.Fatal("the hook never ran the ADD")
			}

			answer := n.Status.Answer(b1)
			if answer == nil || answer.State != tc.want {
				t.Fatalf("agent answered %+v, want %s", answer, tc.want)
			}
			used := a.countIn(t, b1)
			if n.MayRelease(b1) {
				if used != 0 {
					t.Fatalf("the operator may release %s, which holds %d addresses", b1, used)
				}
				if b := a.block(t, b1); b.State != store.BlockQuarantined || !a.pool(t, b1).Draining {
					t.Fatalf("ready-for-release, but %s is %v", b1, b.State)
				}
				if api.CodeOf(r.err) != api.CodePoolExhausted || !strings.Contains(r.err.Error(), b1) {
					t.Fatalf("racing ADD: %v, %v; want refused, naming draining %s", r.addr, r.err, b1)
				}
			} else if r.err != nil || !netip.MustParsePrefix(b1).Contains(r.addr) || used != 1 {
				t.Fatalf("racing ADD: %v, %v, %d used in %s; want it in %s", r.addr, r.err, used, b1, b1)
			}

			// The operator acts on the answer.
			released := c.release(t, nodeName, b1)
			if released != (tc.want == v1alpha1.ReadyForRelease) {
				t.Fatalf("operator released %s: %v", b1, released)
			}
			if !released {
				c.operate(t, nodeName, func(n *v1alpha1.NodeIPAM) { n.Spec.Releases = nil })
				if n := c.answered(t, nodeName); len(n.Status.Releases) != 0 {
					t.Fatalf("answers after the mark was withdrawn: %+v", n.Status.Releases)
				}
				if a.allocated(t)[r.addr] != racer.uid {
					t.Fatalf("the racer lost %s", r.addr)
				}
				return
			}
			eventually(t, "the agent drops the released block", func() (bool, string) {
				n := c.nodeIPAM(t, nodeName)
				return a.block(t, b1) == nil && a.pool(t, b1) == nil && n.StatusCurrent() && n.Status.Answer(b1) == nil,
					fmt.Sprintf("block %+v, status %+v", a.block(t, b1), n.Status)
			})
			late := c.createPod(t, nodeName+"-late", nodeName)
			if addr, err := a.add(t, "sandbox-late", late); api.CodeOf(err) != api.CodePoolExhausted {
				t.Fatalf("ADD after the release: %v, %v; want pool exhausted (b0 full, b1 gone)", addr, err)
			}
		})
	}
}

// TestKubeSeed004RestartKeepsPromise stops the agent in the middle of the
// handshake and starts it again on the same state file. Before it has read
// anything from the API server it allocates from no block; after, b1 stays
// quarantined, the operator releases it, and no ADD ever gets an address
// of b1.
func TestKubeSeed004RestartKeepsPromise(t *testing.T) {
	c := startCluster(t)
	tests := []struct {
		name string
		// crash, when set, stops the agent after the quarantine committed
		// and before the answer was written.
		crash bool
	}{
		{"crash between the quarantine and the answer", true},
		{"restart after the answer", false},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nodeName := fmt.Sprintf("node-restart-%d", i)
			c.createNodeIPAM(t, nodeName, c.createNode(t, nodeName), b0, b1)
			dir := t.TempDir()
			crashed := make(chan struct{})
			var h hooks
			if tc.crash {
				var once sync.Once
				h.beforeAnswer = func(_ context.Context, obj *v1alpha1.NodeIPAM) error {
					if !markedB1(obj) {
						return nil
					}
					once.Do(func() { close(crashed) })
					return errors.New("agent killed before it answered")
				}
			}
			a := c.startAgent(t, dir, nodeName, h, nil)
			a.ready(t)
			web, webAddr := c.startPod(t, a, nodeName+"-web", nodeName)

			c.mark(t, nodeName, b1)
			if tc.crash {
				<-crashed
			} else if n := c.answered(t, nodeName); n.Status.Answer(b1).State != v1alpha1.ReadyForRelease {
				t.Fatalf("answer before the restart: %+v", n.Status.Answer(b1))
			}
			a.stop()
			if n := c.nodeIPAM(t, nodeName); tc.crash && (n.StatusCurrent() || n.MayRelease(b1)) {
				t.Fatalf("the crashed agent answered: %+v", n.Status)
			}

			b := c.newAgent(t, dir, nodeName, hooks{}, nil)
			if blk := b.block(t, b1); blk == nil || blk.State != store.BlockQuarantined {
				t.Fatalf("restored block %s: %+v, want quarantined", b1, blk)
			}
			early := c.createPod(t, nodeName+"-early", nodeName)
			if addr, err := b.add(t, "sandbox-early", early); api.CodeOf(err) != api.CodePoolExhausted {
				t.Fatalf("ADD before the NodeIPAM was read again: %v, %v; want refused", addr, err)
			}
			b.run(t)
			b.ready(t)
			n := c.answered(t, nodeName)
			if ans := n.Status.Answer(b1); ans == nil || ans.State != v1alpha1.ReadyForRelease {
				t.Fatalf("answer after the restart: %+v", ans)
			}
			for j := range 4 {
				_, addr := c.startPod(t, b, fmt.Sprintf("%s-after-%d", nodeName, j), nodeName)
				if !netip.MustParsePrefix(b0).Contains(addr) || addr == webAddr {
					t.Fatalf("ADD after the restart got %s; want a free address of %s", addr, b0)
				}
			}
			if !c.release(t, nodeName, b1) {
				t.Fatal("the operator may not release b1 after the restart")
			}
			eventually(t, "the agent drops the released block", func() (bool, string) {
				return b.block(t, b1) == nil, fmt.Sprintf("%+v", b.block(t, b1))
			})
			if b.allocated(t)[webAddr] != web.uid {
				t.Fatalf("the restart lost %s of %s", webAddr, web)
			}
		})
	}
}
