//go:build linux

package datapath

import (
	"testing"

	"lockstep.dev/lockstep/bpfmaps"
)

func TestCountEvictions(t *testing.T) {
	for _, tc := range []struct {
		name string
		acc  bpfmaps.CTEvictions
		walk ctWalk
		want bpfmaps.CTEvictions
	}{
		{"empty table", bpfmaps.CTEvictions{}, ctWalk{}, bpfmaps.CTEvictions{}},
		{"every entry still there",
			bpfmaps.CTEvictions{}, ctWalk{before: 10, after: 10, left: 10},
			bpfmaps.CTEvictions{}},
		{"what is not left and was not deleted was evicted",
			bpfmaps.CTEvictions{Deleted: 10}, ctWalk{before: 100, after: 100, left: 60},
			bpfmaps.CTEvictions{Deleted: 10, Evicted: 30}},
		{"deleted entries are not evicted",
			bpfmaps.CTEvictions{Deleted: 50, Evicted: 7}, ctWalk{before: 100, after: 100, left: 50},
			bpfmaps.CTEvictions{Deleted: 50, Evicted: 7}},
		{"entries added during the walk never make the count go down",
			bpfmaps.CTEvictions{Evicted: 30}, ctWalk{before: 100, after: 110, left: 75},
			bpfmaps.CTEvictions{Evicted: 30}},
		{"entries added during the walk leave the count short, not negative",
			bpfmaps.CTEvictions{}, ctWalk{before: 100, after: 120, left: 110},
			bpfmaps.CTEvictions{}},
		{"entries no insert counted become untracked",
			bpfmaps.CTEvictions{Deleted: 3}, ctWalk{before: 5, after: 5, left: 12},
			bpfmaps.CTEvictions{Deleted: 3, Untracked: 10}},
		{"untracked entries count as inserted later",
			bpfmaps.CTEvictions{Deleted: 3, Untracked: 10}, ctWalk{before: 25, after: 25, left: 20},
			bpfmaps.CTEvictions{Deleted: 3, Untracked: 10, Evicted: 12}},
		{"untracked only grows by what inserted after the walk cannot explain",
			bpfmaps.CTEvictions{Untracked: 4}, ctWalk{before: 10, after: 14, left: 20},
			bpfmaps.CTEvictions{Untracked: 6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := countEvictions(tc.acc, tc.walk); got != tc.want {
				t.Errorf("countEvictions(%+v, %+v) = %+v, want %+v", tc.acc, tc.walk, got, tc.want)
			}
		})
	}
}
