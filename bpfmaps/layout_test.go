package bpfmaps

import (
	"reflect"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
)

// object is the committed BPF object whose BTF the Go structs must match.
const object = "../agent/datapath/endpoint_bpfel.o"

// TestLayoutMatchesBTF checks every Go twin against its C struct: same
// size, same number of fields, each at the same offset with the same size.
// It needs no privileges: it reads the object file.
func TestLayoutMatchesBTF(t *testing.T) {
	spec, err := ebpf.LoadCollectionSpec(object)
	if err != nil {
		t.Fatalf("load %s: %v (run go generate ./agent/datapath)", object, err)
	}
	for _, tc := range []struct {
		c      string
		goType any
	}{
		{"v6addr", Addr{}},
		{"state", State{}},
		{"endpoint_info", EndpointInfo{}},
		{"policy_outer_key", PolicyOuterKey{}},
		{"policy_key", PolicyKey{}},
		{"port_range", PortRange{}},
		{"policy_value", PolicyValue{}},
		{"ipcache_value", IPCacheValue{}},
		{"cidr_key", CIDRKey{}},
		{"cidr_value", CIDRValue{}},
		{"ct_key", CTKey{}},
		{"ct_entry", CTEntry{}},
		{"ct_cache_slot", CTCacheSlot{}},
		{"svc_ct_entry", SvcCTEntry{}},
		{"svc_key", SvcKey{}},
		{"svc_value", SvcValue{}},
		{"backend_key", BackendKey{}},
		{"backend_value", BackendValue{}},
		{"affinity_key", AffinityKey{}},
		{"affinity_value", AffinityValue{}},
		{"ct_share", CTShare{}},
		{"ct_evictions", CTEvictions{}},
		{"counter", Counter{}},
		{"event", Event{}},
	} {
		t.Run(tc.c, func(t *testing.T) {
			var s *btf.Struct
			if err := spec.Types.TypeByName(tc.c, &s); err != nil {
				t.Fatalf("struct %s not in the object's BTF: %v", tc.c, err)
			}
			gt := reflect.TypeOf(tc.goType)
			if uintptr(s.Size) != gt.Size() {
				t.Fatalf("size: C %d, Go %s %d", s.Size, gt, gt.Size())
			}
			if gt.Kind() != reflect.Struct {
				return // Addr is a [16]byte: size is all there is
			}
			if len(s.Members) != gt.NumField() {
				t.Fatalf("C has %d members, Go %s %d fields", len(s.Members), gt, gt.NumField())
			}
			for i, m := range s.Members {
				f := gt.Field(i)
				msize, err := btf.Sizeof(m.Type)
				if err != nil {
					t.Fatalf("size of %s.%s: %v", tc.c, m.Name, err)
				}
				if uintptr(m.Offset.Bytes()) != f.Offset || uintptr(msize) != f.Type.Size() {
					t.Errorf("%s.%s at %d size %d, Go %s.%s at %d size %d",
						tc.c, m.Name, m.Offset.Bytes(), msize, gt.Name(), f.Name, f.Offset, f.Type.Size())
				}
			}
		})
	}
}

// The map sizes the Go side assumes are the object's.
func TestMapSpecsMatchNames(t *testing.T) {
	spec, err := ebpf.LoadCollectionSpec(object)
	if err != nil {
		t.Fatalf("load %s: %v", object, err)
	}
	for _, name := range Names {
		ms, ok := spec.Maps[name]
		if !ok {
			t.Errorf("map %s (maps.Names) not in the object", name)
			continue
		}
		if ms.Pinning != ebpf.PinByName {
			t.Errorf("map %s is not pinned by name", name)
		}
	}
	for _, name := range []string{RuleAllowedMap, DeniedMap} {
		if ms, ok := spec.Maps[name]; !ok || ms.Pinning != ebpf.PinNone {
			t.Errorf("map %s: in the object %v, want it there and not pinned", name, ok)
		}
	}
	if got := spec.Maps[CountersMap].MaxEntries; got != NumReasons {
		t.Errorf("%s has %d entries, NumReasons is %d", CountersMap, got, NumReasons)
	}
	for _, c := range []struct {
		name string
		want uint32
	}{{ServicesMap, 2 * MaxFrontends}, {BackendsMap, 2 * MaxBackends}, {CTMap, CTCapacity}, {SvcCTMap, SvcCTCapacity},
		{CTShareMap, CTShareSlots}, {CTReleasedMap, CTShareSlots}, {CTInsertedMap, CTTables}, {CTEvictionsMap, CTTables},
		{RuleAllowedMap, MaxRuleIDs}, {DeniedMap, CTShareSlots}} {
		if got := spec.Maps[c.name].MaxEntries; got != c.want {
			t.Errorf("%s has %d entries, want %d", c.name, got, c.want)
		}
	}
	if len(Reasons()) > NumReasons {
		t.Errorf("%d reasons, %s has room for %d", len(Reasons()), CountersMap, NumReasons)
	}
}
