package operator

import (
	"slices"
	"testing"
	"time"

	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

// TestKubeDrainConfirmedAgainstAPIServer: the informer's IPPools can lag
// the NodeIPAMs (a range added to a pool, a block cut from it by the
// ledger, which reads the pool from the API server). A plan made on such
// a cache drains a block that is inside its pool; since a drain mark is
// never withdrawn, the write confirms the pool with the API server first
// and drains only what the API server's pool leaves outside, or a block
// whose pool is really gone.
func TestKubeDrainConfirmedAgainstAPIServer(t *testing.T) {
	cl := startCluster(t)
	cl.createPool("v4", 26, "10.0.0.0/24") // the truth
	cfg, err := Config{REST: cl.rest}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	ctl := newController(cl.c, &cfg, nil)

	const b = v1alpha1.CIDR("10.0.0.128/26")
	n := nodeIPAM("a").block("10.0.0.0/26", 10).block(b, 3).NodeIPAM
	// The cache has not seen 10.0.0.128/25 added yet.
	stale := &input{pools: []*v1alpha1.IPPool{pool("v4", 26, "10.0.0.0/25")}, nodes: nodes("a"),
		nodeIPAMs: []*v1alpha1.NodeIPAM{n}, now: t0, timers: timers{}, minFree: 16, delay: time.Hour}
	p := planFor(stale)
	if got := describe(p).changes; !slices.Equal(got, []string{"a drain " + string(b)}) {
		t.Fatalf("plan on the stale cache: %q, want the drain this test is about", got)
	}
	confirm := func() []string {
		t.Helper()
		u, _, err := ctl.confirmDrains(t.Context(), p.updates[0], stale)
		if err != nil {
			t.Fatal(err)
		}
		if u == nil {
			return nil
		}
		var out []string
		for _, c := range u.changes {
			out = append(out, string(c.action)+" "+string(c.cidr))
			if c.action == actionDrain && !u.new.Spec.Draining(c.cidr) {
				t.Errorf("%s: no drain mark in %+v", c.cidr, u.new.Spec.Releases)
			}
		}
		return out
	}
	if got := confirm(); got != nil {
		t.Fatalf("with the block inside the API server's pool: %q, want no write", got)
	}

	// The administrator really shrinks the pool: the drain stands.
	pl := cl.getPool("v4")
	pl.Spec.CIDRs = []v1alpha1.CIDR{"10.0.0.0/25"}
	if _, err := cl.c.lockstep.IPPools().Update(t.Context(), pl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := confirm(); !slices.Equal(got, []string{"drain " + string(b)}) {
		t.Fatalf("with the pool shrunk: %q, want the drain", got)
	}

	// Deleted: both blocks drain.
	if err := cl.c.lockstep.IPPools().Delete(t.Context(), "v4", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := confirm(); !slices.Equal(got, []string{"drain 10.0.0.0/26", "drain " + string(b)}) {
		t.Fatalf("with the pool deleted: %q, want both blocks drained", got)
	}
}
