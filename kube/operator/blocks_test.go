package operator

import (
	"net/netip"
	"slices"
	"testing"

	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

func TestCapacity(t *testing.T) {
	tests := []struct {
		prefix string
		want   int64
	}{
		{"10.0.0.0/26", 64},
		{"10.0.0.0/32", 1},
		{"0.0.0.0/0", 1 << 32},
		{"fd00::/120", 256},
		{"fd00::/64", maxCapacity},
		{"::/0", maxCapacity},
	}
	for _, tt := range tests {
		if got := capacity(netip.MustParsePrefix(tt.prefix)); got != tt.want {
			t.Errorf("capacity(%s) = %d, want %d", tt.prefix, got, tt.want)
		}
	}
}

func TestAfter(t *testing.T) {
	tests := []struct {
		prefix, want string // want "" for no address after
	}{
		{"10.0.0.0/26", "10.0.0.64"},
		{"10.0.0.192/26", "10.0.1.0"},
		{"10.255.255.255/32", "11.0.0.0"},
		{"255.255.255.192/26", ""},
		{"fd00::ff00/120", "fd00::1:0"},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ff00/120", ""},
		{"::/0", ""},
	}
	for _, tt := range tests {
		got, ok := after(netip.MustParsePrefix(tt.prefix))
		if tt.want == "" {
			if ok {
				t.Errorf("after(%s) = %s, want none", tt.prefix, got)
			}
			continue
		}
		if !ok || got != netip.MustParseAddr(tt.want) {
			t.Errorf("after(%s) = %s, %v; want %s", tt.prefix, got, ok, tt.want)
		}
	}
}

// TestFreeBlocksNeverOverlapHeld walks pools past held prefixes of every
// size relation: the same size, larger (covering several blocks) and
// smaller (inside one block).
func TestFreeBlocksNeverOverlapHeld(t *testing.T) {
	tests := []struct {
		name   string
		ranges []string
		size   int
		held   []string
		want   []string // every free block, in order
	}{{
		name:   "nothing held",
		ranges: []string{"10.0.0.0/24"},
		size:   26,
		want:   []string{"10.0.0.0/26", "10.0.0.64/26", "10.0.0.128/26", "10.0.0.192/26"},
	}, {
		name:   "same-size blocks held",
		ranges: []string{"10.0.0.0/24"},
		size:   26,
		held:   []string{"10.0.0.0/26", "10.0.0.128/26"},
		want:   []string{"10.0.0.64/26", "10.0.0.192/26"},
	}, {
		name:   "a larger block held covers two",
		ranges: []string{"10.0.0.0/24"},
		size:   26,
		held:   []string{"10.0.0.64/25"}, // 10.0.0.0/25 masked: covers .0 and .64
		want:   []string{"10.0.0.128/26", "10.0.0.192/26"},
	}, {
		name:   "a smaller block held spoils its whole block",
		ranges: []string{"10.0.0.0/24"},
		size:   26,
		held:   []string{"10.0.0.200/30"},
		want:   []string{"10.0.0.0/26", "10.0.0.64/26", "10.0.0.128/26"},
	}, {
		name:   "two ranges",
		ranges: []string{"10.0.0.0/25", "10.1.0.0/26"},
		size:   26,
		held:   []string{"10.0.0.0/26"},
		want:   []string{"10.0.0.64/26", "10.1.0.0/26"},
	}, {
		name:   "range at the top of the address space",
		ranges: []string{"255.255.255.0/24"},
		size:   25,
		want:   []string{"255.255.255.0/25", "255.255.255.128/25"},
	}, {
		name:   "IPv6, a held /64 skipped in one step",
		ranges: []string{"fd00::/63"},
		size:   120,
		held:   []string{"fd00::/64"},
		want:   nil, // checked by the first block only below
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			held := newHeldSet()
			for _, h := range tt.held {
				held.add(netip.MustParsePrefix(h), "other")
			}
			var ranges []netip.Prefix
			for _, r := range tt.ranges {
				ranges = append(ranges, netip.MustParsePrefix(r))
			}
			w := newFreeBlocks(ranges, tt.size, held)
			if tt.want == nil {
				got, ok := w.take("me")
				if !ok || got != netip.MustParsePrefix("fd00:0:0:1::/120") {
					t.Fatalf("first free block = %s, %v; want fd00:0:0:1::/120", got, ok)
				}
				return
			}
			var got []string
			for {
				b, ok := w.take("me")
				if !ok {
					break
				}
				got = append(got, b.String())
				if len(got) > len(tt.want)+1 {
					break
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("free blocks = %v, want %v", got, tt.want)
			}
			// What was taken is now held: a second walker finds nothing.
			if b, ok := newFreeBlocks(ranges, tt.size, held).peek(); ok {
				t.Errorf("after taking every block, a new walker still finds %s", b)
			}
		})
	}
}

func TestParsePools(t *testing.T) {
	tests := []struct {
		name   string
		pools  []*v1alpha1.IPPool
		reason map[string]string
	}{{
		name:   "dual stack",
		pools:  []*v1alpha1.IPPool{pool("v4", 26, "10.244.0.0/16"), pool("v6", 120, "fd00:10:244::/56")},
		reason: map[string]string{"v4": reasonReady, "v6": reasonReady},
	}, {
		name:   "overlapping pools are both refused",
		pools:  []*v1alpha1.IPPool{pool("a", 26, "10.244.0.0/16"), pool("b", 26, "10.244.128.0/20"), pool("c", 26, "10.245.0.0/16")},
		reason: map[string]string{"a": reasonOverlap, "b": reasonOverlap, "c": reasonReady},
	}, {
		name:   "mixed families",
		pools:  []*v1alpha1.IPPool{pool("mixed", 26, "10.244.0.0/16", "fd00::/56")},
		reason: map[string]string{"mixed": reasonInvalidSpec},
	}, {
		name:   "block larger than its range",
		pools:  []*v1alpha1.IPPool{pool("small", 24, "10.244.0.0/26")},
		reason: map[string]string{"small": reasonInvalidSpec},
	}, {
		name:   "not canonical",
		pools:  []*v1alpha1.IPPool{pool("bad", 26, "10.244.0.1/16")},
		reason: map[string]string{"bad": reasonInvalidSpec},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, p := range parsePools(tt.pools) {
				if want := tt.reason[p.pool.Name]; p.reason != want {
					t.Errorf("pool %s: reason %q (%s), want %q", p.pool.Name, p.reason, p.problem, want)
				}
				if p.ready() != (p.reason == reasonReady) {
					t.Errorf("pool %s: ready() = %v with reason %q", p.pool.Name, p.ready(), p.reason)
				}
			}
		})
	}
}
