package enforcer

import (
	"context"
	"testing"

	"lockstep.dev/lockstep/agent/store"
)

// invalidatingDataplane counts Invalidate calls.
type invalidatingDataplane struct {
	*setDataplane
	invalidated int
}

func (d *invalidatingDataplane) Invalidate() { d.invalidated++ }

// A resync must make a dataplane that diffs against its own memory read
// the real state back; otherwise drift behind lockstep's back survives it.
func TestResyncInvalidatesDiffingDataplanes(t *testing.T) {
	st, err := store.New()
	if err != nil {
		t.Fatal(err)
	}
	dp := &invalidatingDataplane{setDataplane: newSetDataplane()}
	e := New(st, dp, nil)
	ctx := context.Background()
	if err := e.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if dp.invalidated != 0 {
		t.Fatalf("Sync invalidated the dataplane %d times; only Resync should", dp.invalidated)
	}
	if err := e.Resync(ctx); err != nil {
		t.Fatal(err)
	}
	if dp.invalidated != 1 {
		t.Fatalf("Resync invalidated the dataplane %d times, want 1", dp.invalidated)
	}
}
