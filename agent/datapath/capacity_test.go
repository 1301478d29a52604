//go:build linux

package datapath

import (
	"testing"

	"lockstep.dev/lockstep/agent/policy"
	"lockstep.dev/lockstep/bpfmaps"
)

// TestCapacitiesMatchTheCompiler: the limits the compiler keeps each
// state within are the capacities of the maps the state is written to.
// A larger map wastes nothing; a smaller one would let a state the
// compiler accepted fail every apply of the node.
func TestCapacitiesMatchTheCompiler(t *testing.T) {
	spec, err := loadEndpoint()
	if err != nil {
		t.Fatal(err)
	}
	m := spec.Maps[bpfmaps.CIDRsMap]
	if m == nil {
		t.Fatalf("no map %s in the object", bpfmaps.CIDRsMap)
	}
	if int(m.MaxEntries) != policy.CIDRCapacity {
		t.Errorf("%s holds %d entries, the compiler's limits assume policy.CIDRCapacity = %d", bpfmaps.CIDRsMap, m.MaxEntries, policy.CIDRCapacity)
	}
	// The trie holds the applied state's prefixes and the new state's.
	if 2*(policy.DefaultLimits.Prefixes+2) > int(m.MaxEntries) {
		t.Errorf("default limits allow two states of %d prefixes and the two default routes, more than %s holds (%d)", policy.DefaultLimits.Prefixes, bpfmaps.CIDRsMap, m.MaxEntries)
	}
}
