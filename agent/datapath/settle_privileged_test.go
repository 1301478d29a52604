//go:build linux

package datapath

import (
	"errors"
	"reflect"
	"sync/atomic"
	"testing"
	"time"

	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/test/testenv"
)

// holdGrace replaces the settler's wait for a grace period with one that
// reports each call on entered and returns the next value of results.
// When tb ends, waits return at once, so Close never hangs on one.
func (d *Datapath) holdGrace(tb testing.TB, entered chan<- struct{}, results <-chan error) {
	ended := make(chan struct{})
	tb.Cleanup(func() { close(ended) })
	d.mu.Lock()
	d.settler.graceWait = func() error {
		select {
		case entered <- struct{}{}:
		case <-ended:
			return nil
		}
		select {
		case err := <-results:
			return err
		case <-ended:
			return nil
		}
	}
	d.mu.Unlock()
}

// TestPrivilegedApplyWaitsForPacketsOfPreviousGeneration holds the grace
// period that follows a flip and checks that the next Apply does not write
// the idle parity, which packets that read the previous generation may
// still be reading, until it has passed.
func TestPrivilegedApplyWaitsForPacketsOfPreviousGeneration(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	d.fakeAttach("gone-in-b", loIfindex+100)
	d.fakeAttach("new-in-b", loIfindex+101)
	entered, results := make(chan struct{}), make(chan error)
	d.holdGrace(t, entered, results)

	mustApply(t, d, stateA())
	<-entered // the settler waits for the grace period after A's flip
	before := takeSnapshot(t, d)

	var wrote atomic.Bool
	d.mu.Lock()
	d.beforeFlip = func() { wrote.Store(true) }
	d.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- d.Apply(stateB()) }()

	select {
	case err := <-done:
		t.Fatalf("Apply of B returned (%v) while packets of the generation before A's flip could still run", err)
	case <-time.After(200 * time.Millisecond):
	}
	if wrote.Load() {
		t.Fatal("Apply of B wrote the idle parity before the grace period passed")
	}
	if after := takeSnapshot(t, d); !reflect.DeepEqual(before, after) {
		t.Fatal("the maps changed while the grace period after A's flip was held")
	}

	results <- nil // the grace period passes
	<-entered      // the settler now waits for the one after B's flip
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Apply of B still waiting after the grace period passed")
	}
	if !wrote.Load() {
		t.Fatal("Apply of B returned without writing")
	}
	results <- nil
}

// TestPrivilegedApplyWaitsItselfWhenTheSettlerFailed makes the settler's
// wait fail: the next Apply then waits for the grace period on its own
// instead of writing at once or blocking for ever.
func TestPrivilegedApplyWaitsItselfWhenTheSettlerFailed(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	d.fakeAttach("gone-in-b", loIfindex+100)
	d.fakeAttach("new-in-b", loIfindex+101)
	entered, results := make(chan struct{}), make(chan error)
	d.holdGrace(t, entered, results)

	mustApply(t, d, stateA())
	<-entered
	results <- errors.New("injected failure")
	// Let the settler record its failure first: an Apply that came before
	// would kick it into a wait of its own, which the next receive on
	// entered would take for Apply's.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		d.mu.Lock()
		failed := d.settler.failed
		d.mu.Unlock()
		if failed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the settler did not record its failed wait within 30s")
		}
	}

	done := make(chan error, 1)
	go func() { done <- d.Apply(stateB()) }()
	select {
	case <-entered: // Apply's own wait
	case err := <-done:
		t.Fatalf("Apply of B returned (%v) without waiting for the grace period the settler failed to wait for", err)
	case <-time.After(30 * time.Second):
		t.Fatal("Apply of B neither waited for a grace period nor returned")
	}
	results <- nil
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestPrivilegedApplyAfterReadBackOfAnotherGeneration: Invalidate reads
// back a generation that no flip of this Datapath announced (written
// behind its back); the next Apply must wait for one grace period for it,
// not for ever.
func TestPrivilegedApplyAfterReadBackOfAnotherGeneration(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	d.fakeAttach("gone-in-b", loIfindex+100)
	mustApply(t, d, stateA())
	d.waitQuiet(t)
	if err := d.state.Put(uint32(0), bpfmaps.State{Gen: d.Generation() + 7}); err != nil {
		t.Fatal(err)
	}
	d.Invalidate()
	done := make(chan error, 1)
	go func() { done <- d.Apply(stateA()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Apply after reading back another generation still waiting after 30s")
	}
}
