//go:build linux

package datapath

import (
	"errors"
	"testing"

	"github.com/cilium/ebpf"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/test/testenv"
)

// The reclaimer's delete races with a new connection over the tuple of an
// expired entry: between its walk and its delete, a packet may make the
// entry live again. takeExpired deletes only what is still expired when
// it takes the entry out, and puts back, counted, what is not.
func TestPrivilegedReclaimRacesNewConnection(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.stopReclaimer()
	now := coarseNow(t)
	expired := bpfmaps.CTEntry{Expires: now - 60e9, Flags: bpfmaps.CTAllowed(uint8(policyapi.Egress), 0)}
	live := bpfmaps.CTEntry{Expires: now + 60e9, Flags: bpfmaps.CTAllowed(uint8(policyapi.Egress), 0)}
	key := ctKeyOf(loIfindex, flowRequest)
	of := func(v bpfmaps.CTEntry) (uint64, uint8) { return v.Expires, bpfmaps.CTEntryDir(v.Flags) }
	for _, tc := range []struct {
		name      string
		table     *bpfmaps.CTEntry // the entry when the reclaimer takes it; nil: none
		want      ctFate
		wantRaced uint64
		wantLeft  *bpfmaps.CTEntry
	}{
		{"still expired: deleted", &expired, ctDeleted, 0, nil},
		{"made live again since the walk: put back", &live, ctKept, 1, &live},
		{"evicted since the walk: nothing to do", nil, ctAbsent, 0, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			deleteCTEntries(t, d)
			if tc.table != nil {
				if err := d.ct.Put(key, *tc.table); err != nil {
					t.Fatal(err)
				}
			}
			var walk ctWalk
			fate, _, err := takeExpired(d.ct, key, now, &walk, of)
			if err != nil {
				t.Fatal(err)
			}
			if fate != tc.want || walk.raced != tc.wantRaced {
				t.Errorf("takeExpired: fate %d, raced %d; want %d, %d", fate, walk.raced, tc.want, tc.wantRaced)
			}
			var got bpfmaps.CTEntry
			err = d.ct.Lookup(key, &got)
			switch {
			case tc.wantLeft == nil && !errors.Is(err, ebpf.ErrKeyNotExist):
				t.Errorf("entry after takeExpired: %+v (%v), want none", got, err)
			case tc.wantLeft != nil && (err != nil || got != *tc.wantLeft):
				t.Errorf("entry after takeExpired: %+v (%v), want %+v", got, err, *tc.wantLeft)
			}
		})
	}
}
