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
	// The Service maps hold one state per parity.
	for _, c := range []struct {
		name           string
		maps, compiler int
	}{
		{bpfmaps.ServicesMap + " per parity", int(spec.Maps[bpfmaps.ServicesMap].MaxEntries) / 2, policy.ServiceFrontendCapacity},
		{bpfmaps.BackendsMap + " per parity", int(spec.Maps[bpfmaps.BackendsMap].MaxEntries) / 2, policy.ServiceBackendCapacity},
		{"bpfmaps.MaxFrontends", bpfmaps.MaxFrontends, policy.ServiceFrontendCapacity},
		{"bpfmaps.MaxBackends", bpfmaps.MaxBackends, policy.ServiceBackendCapacity},
		{"backends per frontend", maxBackendsPerFrontend, policy.MaxBackendsPerFrontend},
	} {
		if c.maps != c.compiler {
			t.Errorf("%s: %d, the compiler's limits assume %d", c.name, c.maps, c.compiler)
		}
	}
	if policy.DefaultLimits.ServiceFrontends != policy.ServiceFrontendCapacity || policy.DefaultLimits.ServiceBackends != policy.ServiceBackendCapacity {
		t.Errorf("default limits %+v do not bound the Services by the maps' capacities", policy.DefaultLimits)
	}
}
