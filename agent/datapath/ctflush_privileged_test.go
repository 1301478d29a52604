//go:build linux

package datapath

import (
	"errors"
	"testing"
	"time"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/test/testenv"
)

// TestPrivilegedConntrackFlushedWhenEndpointLeaves: once an Apply removes
// an endpoint, the settler deletes its conntrack entries and drops the
// flow caches' copies, so a packet of a connection it had is no longer
// waved through by the fast path; the entries of other ifindexes stay.
func TestPrivilegedConntrackFlushedWhenEndpointLeaves(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, scenario(true, true))
	d.flushCT(t)
	req := flowRequest
	if got := run(t, d.fromPod, req); got != actOK {
		t.Fatalf("request: got %s, want OK", actName(got))
	}
	const otherIfindex = 4242
	other := bpfmaps.CTKey{Ifindex: otherIfindex, Proto: policyapi.ProtoTCP, Port: [2]uint16{1, 2}}
	if err := d.ct.Put(other, bpfmaps.CTEntry{Flags: bpfmaps.CTAllowed(uint8(policyapi.Egress), 0)}); err != nil {
		t.Fatal(err)
	}
	if n := ctEntriesOf(t, d, loIfindex); n != 1 {
		t.Fatalf("%d conntrack entries at the endpoint, want 1", n)
	}
	// Every CPU's flow cache holds a copy of the connection: the flush
	// must drop the copies too.
	d.fillCTCache(t, bpfmaps.CTCacheSlot{
		Key:   requestKey(),
		Epoch: d.ctEpochNow(t), Flags: bpfmaps.CTAllowed(uint8(policyapi.Egress), 0),
		ValidUntil: coarseNow(t) + uint64(10*time.Second),
	})

	d.mu.Lock()
	flushes := d.settler.ctFlushes
	d.mu.Unlock()
	want := scenario(true, true)
	delete(want.Endpoints, podIf)
	mustApply(t, d, want)
	deadline := time.Now().Add(10 * time.Second)
	for {
		d.mu.Lock()
		done, err := d.settler.ctFlushes > flushes, d.settler.err
		d.mu.Unlock()
		if done {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("no conntrack flush 10s after the endpoint left (settler error: %v)", err)
		}
		time.Sleep(time.Millisecond)
	}
	if n := ctEntriesOf(t, d, loIfindex); n != 0 {
		t.Errorf("%d conntrack entries of the removed endpoint remain", n)
	}
	if n := ctEntriesOf(t, d, otherIfindex); n != 1 {
		t.Errorf("%d conntrack entries of another ifindex remain, want 1", n)
	}
	if got := run(t, d.fromPod, req); got != actShot {
		t.Errorf("a packet of the removed endpoint's connection: got %s, want SHOT (no endpoint)", actName(got))
	}
}

// TestPrivilegedConntrackFlushedAtClose: a flush still queued when the
// datapath closes (its settler round failed) is done by Close, after a
// grace period.
func TestPrivilegedConntrackFlushedAtClose(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	entered, results := make(chan struct{}), make(chan error)
	d.holdGrace(t, entered, results)
	mustApply(t, d, scenario(true, true))
	<-entered
	results <- nil // the round after the first flip
	d.flushCT(t)
	req := flowRequest
	if got := run(t, d.fromPod, req); got != actOK {
		t.Fatalf("request: got %s, want OK", actName(got))
	}
	want := scenario(true, true)
	delete(want.Endpoints, podIf)
	mustApply(t, d, want)
	<-entered
	results <- errors.New("held") // the round fails: the flush stays queued
	d.mu.Lock()
	for !d.settler.failed {
		d.settler.cond.Wait()
	}
	d.mu.Unlock()
	if n := ctEntriesOf(t, d, loIfindex); n != 1 {
		t.Fatalf("%d conntrack entries before Close, want the request's 1", n)
	}

	closed := make(chan error, 1)
	go func() { closed <- d.Close() }()
	var err error
	select {
	case <-entered: // Close waits for a grace period before its flush
		results <- nil
		err = <-closed
	case err = <-closed:
		t.Error("Close returned without waiting for a grace period")
	}
	if err != nil {
		t.Fatal(err)
	}
	if n := ctEntriesOf(t, d, loIfindex); n != 0 {
		t.Errorf("%d conntrack entries of the removed endpoint left after Close", n)
	}
}

// ctEntriesOf counts the conntrack entries keyed by ifindex.
func ctEntriesOf(t *testing.T, d *Datapath, ifindex uint32) int {
	t.Helper()
	es, err := bpfmaps.Dump(d.pinRoot, bpfmaps.CTMap)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range es {
		if e.Key.(bpfmaps.CTKey).Ifindex == ifindex {
			n++
		}
	}
	return n
}
