package operator

import (
	"fmt"
	"testing"
	"time"

	coordinationv1 "lockstep.dev/lockstep/kube/api/coordination/v1"
	apierrors "lockstep.dev/lockstep/kube/api/errors"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
)

func (cl *cluster) lease() *coordinationv1.Lease {
	cl.t.Helper()
	l := new(coordinationv1.Lease)
	err := cl.c.leases.Get().Namespace(DefaultLeaseNamespace).Resource("leases").Name(DefaultLeaseName).Do(cl.t.Context()).Into(l)
	if err != nil {
		return nil
	}
	return l
}

// hasBlock reports whether NodeIPAM name exists and holds a block.
func (cl *cluster) hasBlock(name string) func() (bool, string) {
	return func() (bool, string) {
		n := cl.nodeIPAM(name)
		return n != nil && len(n.Spec.Blocks) > 0, fmt.Sprintf("nodeipam %s blocks %v", name, blockNames(n))
	}
}

// TestKubeOnlyTheLeaderWrites runs two replicas with leader election: one
// leads and is the only one to send a single write; when its context is
// cancelled it stops and releases the Lease, and the other takes over and
// serves a Node created after the handover.
func TestKubeOnlyTheLeaderWrites(t *testing.T) {
	cl := startCluster(t)
	inv := cl.watchInvariants()
	cl.createPool("v4", 28, "10.0.0.0/24")
	cl.createNode("a")
	cl.createNode("b")
	o := opts{leaderElect: true, minFree: 16, delay: time.Minute}
	r1, r2 := cl.startReplica("r1", o), cl.startReplica("r2", o)

	cl.eventually(30*time.Second, "nodes a and b have blocks", func() (bool, string) {
		okA, whyA := cl.hasBlock("a")()
		okB, whyB := cl.hasBlock("b")()
		return okA && okB, whyA + "; " + whyB
	})
	leader, follower := r1, r2
	if h := holder(cl.lease()); h == r2.identity {
		leader, follower = r2, r1
	} else if h != r1.identity {
		t.Fatalf("lease holder %q is neither replica (%s, %s)", h, r1.identity, r2.identity)
	}
	// Give the follower every chance to misbehave.
	time.Sleep(time.Second)
	if n := follower.writes.Load(); n != 0 {
		t.Fatalf("follower %s sent %d writes while %s led", follower.name, n, leader.name)
	}
	if leader.writes.Load() == 0 {
		t.Fatalf("leader %s sent no write, yet nodes got blocks", leader.name)
	}
	// Both are alive and ready, the standby too; each says what it is.
	for _, r := range []*replica{leader, follower} {
		for _, path := range []string{"/healthz", "/readyz"} {
			if code, body := r.get(t, path); code != 200 {
				t.Errorf("%s %s = %d %q, want 200", r.name, path, code, body)
			}
		}
	}
	_, metrics := leader.get(t, "/metrics")
	if v, _ := sample(metrics, "lockstep_operator_leader"); v != 1 {
		t.Errorf("leader %s: lockstep_operator_leader = %v, want 1", leader.name, v)
	}
	if v, _ := sample(metrics, `lockstep_operator_blocks_assigned_total{pool="v4"}`); v < 2 {
		t.Errorf("leader %s assigned blocks to nodes a and b but counts %v", leader.name, v)
	}
	if v, _ := sample(metrics, `lockstep_operator_passes_total{result="ok"}`); v < 1 {
		t.Errorf("leader %s counts %v successful passes", leader.name, v)
	}
	_, metrics = follower.get(t, "/metrics")
	if v, ok := sample(metrics, "lockstep_operator_leader"); !ok || v != 0 {
		t.Errorf("follower %s: lockstep_operator_leader = %v (%v), want 0", follower.name, v, ok)
	}
	if _, ok := sample(metrics, `lockstep_operator_blocks_assigned_total{pool="v4"}`); ok {
		t.Errorf("follower %s counts assigned blocks while it never led", follower.name)
	}

	stopped := time.Now()
	leader.stop(t)
	leaderWrites := leader.writes.Load()
	cl.createNode("c")
	cl.eventually(20*time.Second, "node c, created after the leader stopped, has a block", cl.hasBlock("c"))
	t.Logf("%s took over and served node c %s after %s stopped", follower.name, time.Since(stopped).Round(time.Millisecond), leader.name)
	if h := holder(cl.lease()); h != follower.identity {
		t.Errorf("lease holder %q, want %s", h, follower.identity)
	}
	if n := leader.writes.Load(); n != leaderWrites {
		t.Errorf("stopped leader %s sent %d more writes", leader.name, n-leaderWrites)
	}
	if follower.writes.Load() == 0 {
		t.Error("the new leader sent no write")
	}
	_, metrics = follower.get(t, "/metrics")
	if v, _ := sample(metrics, "lockstep_operator_leader"); v != 1 {
		t.Errorf("new leader %s: lockstep_operator_leader = %v, want 1", follower.name, v)
	}
	if code, body := follower.get(t, "/readyz"); code != 200 {
		t.Errorf("new leader %s /readyz = %d %q", follower.name, code, body)
	}
	inv.check(t)

	// The replicas ran as the operator's ServiceAccount: it may not write
	// the agents' half of the handshake.
	op, err := newClients(cl.operatorREST())
	if err != nil {
		t.Fatal(err)
	}
	n := cl.nodeIPAM("a")
	n.Status.ObservedGeneration = n.Generation
	if _, err := op.lockstep.NodeIPAMs().UpdateStatus(t.Context(), n, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the operator's ServiceAccount wrote nodeipam status: %v; want Forbidden", err)
	}
}

// TestKubeLeaderThatLosesTheLeaseStopsWriting takes the Lease from a
// leading replica behind its back: the replica must stop writing within a
// retry period or two, and lead again only once the Lease is free.
func TestKubeLeaderThatLosesTheLeaseStopsWriting(t *testing.T) {
	cl := startCluster(t)
	cl.createPool("v4", 28, "10.0.0.0/24")
	cl.createNode("a")
	r := cl.startReplica("r", opts{leaderElect: true, minFree: 16, delay: time.Minute})
	cl.eventually(30*time.Second, "node a has a block", cl.hasBlock("a"))

	// Another process takes the Lease, as if r had stalled past its
	// expiry: holder changed, renewed now, for an hour.
	steal := func(who string, secs int32) {
		for {
			l := cl.lease()
			now := metav1.NewMicroTime(time.Now())
			l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &who, &secs, &now
			err := cl.c.leases.Put().Namespace(l.Namespace).Resource("leases").Name(l.Name).Body(l).Do(t.Context()).Error()
			if err == nil {
				return
			}
			t.Logf("take the lease: %v; again", err)
		}
	}
	steal("intruder", 3600)
	// r notices at its next renewal, one retry period (250ms) later.
	time.Sleep(time.Second)
	before := r.writes.Load()
	cl.createNode("b")
	time.Sleep(3 * time.Second)
	if n := r.writes.Load() - before; n != 0 {
		t.Fatalf("replica sent %d writes after losing the lease", n)
	}
	if n := cl.nodeIPAM("b"); n != nil {
		t.Fatalf("nodeipam b was created while nobody led: %v", n)
	}

	steal("", 1) // the intruder releases it
	cl.eventually(20*time.Second, "r leads again and serves node b", cl.hasBlock("b"))
	if h := holder(cl.lease()); h != r.identity {
		t.Errorf("lease holder %q, want %s", h, r.identity)
	}
}
