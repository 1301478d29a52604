package ipam

import (
	"errors"
	"net/netip"
	"testing"
)

func TestUsableAndSize(t *testing.T) {
	tests := []struct {
		cidr        string
		first, last string
		size        uint64
	}{
		{"10.244.0.0/24", "10.244.0.1", "10.244.0.254", 254},
		{"10.244.0.7/24", "10.244.0.1", "10.244.0.254", 254}, // host bits ignored
		{"10.0.0.0/30", "10.0.0.1", "10.0.0.2", 2},
		{"10.0.0.0/31", "10.0.0.0", "10.0.0.1", 2},
		{"10.0.0.5/32", "10.0.0.5", "10.0.0.5", 1},
		{"fd00:10:244::/120", "fd00:10:244::1", "fd00:10:244::ff", 255},
		{"fd00::/127", "fd00::", "fd00::1", 2},
		{"fd00::/64", "fd00::1", "fd00::ffff:ffff:ffff:ffff", 1<<64 - 1},
		{"fd00::/8", "fd00::1", "fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 1<<64 - 1},
	}
	for _, tc := range tests {
		p := netip.MustParsePrefix(tc.cidr)
		first, last, ok := Usable(p)
		if !ok || first.String() != tc.first || last.String() != tc.last {
			t.Errorf("Usable(%s) = %s..%s %v, want %s..%s", tc.cidr, first, last, ok, tc.first, tc.last)
		}
		if got := Size(p); got != tc.size {
			t.Errorf("Size(%s) = %d, want %d", tc.cidr, got, tc.size)
		}
	}
	if Contains(netip.MustParsePrefix("10.0.0.0/24"), netip.MustParseAddr("10.0.0.255")) {
		t.Error("broadcast address reported usable")
	}
}

// fakeUse is a set of used addresses standing in for the store.
type fakeUse map[netip.Addr]bool

func (f fakeUse) inUse(a netip.Addr) (bool, error) { return f[a], nil }

func TestNext(t *testing.T) {
	p4 := netip.MustParsePrefix("10.0.0.0/29") // usable .1 - .6
	p6 := netip.MustParsePrefix("fd00::/125")  // usable ::1 - ::7
	a := netip.MustParseAddr
	tests := []struct {
		name  string
		pool  netip.Prefix
		start string
		used  []string
		want  string
		err   error
	}{
		{"empty pool starts at first", p4, "", nil, "10.0.0.1", nil},
		{"start is honoured", p4, "10.0.0.4", nil, "10.0.0.4", nil},
		{"skips used", p4, "10.0.0.1", []string{"10.0.0.1", "10.0.0.2"}, "10.0.0.3", nil},
		{"wraps around", p4, "10.0.0.5", []string{"10.0.0.5", "10.0.0.6"}, "10.0.0.1", nil},
		{"start outside pool", p4, "192.0.2.1", nil, "10.0.0.1", nil},
		{"network address never", p4, "10.0.0.0", nil, "10.0.0.1", nil},
		{"exhausted", p4, "10.0.0.1", []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"}, "", ErrExhausted},
		{"ipv6 reuse freed", p6, "fd00::7", []string{"fd00::7", "fd00::1", "fd00::3"}, "fd00::2", nil},
		{"ipv6 exhausted", p6, "", []string{"fd00::1", "fd00::2", "fd00::3", "fd00::4", "fd00::5", "fd00::6", "fd00::7"}, "", ErrExhausted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			used := fakeUse{}
			for _, u := range tc.used {
				used[a(u)] = true
			}
			var start netip.Addr
			if tc.start != "" {
				start = a(tc.start)
			}
			got, err := Next(tc.pool, start, uint64(len(used)), used.inUse)
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if tc.err == nil && got.String() != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// TestNextHandsOutEveryAddressOnce fills a pool, then frees one address and
// checks exactly that one comes back.
func TestNextHandsOutEveryAddressOnce(t *testing.T) {
	p := netip.MustParsePrefix("10.1.0.0/24")
	used := fakeUse{}
	var cursor netip.Addr
	for range Size(p) {
		addr, err := Next(p, cursor, uint64(len(used)), used.inUse)
		if err != nil {
			t.Fatal(err)
		}
		if used[addr] {
			t.Fatalf("%s handed out twice", addr)
		}
		used[addr] = true
		cursor = addr.Next()
	}
	if _, err := Next(p, cursor, uint64(len(used)), used.inUse); !errors.Is(err, ErrExhausted) {
		t.Fatalf("full pool: %v", err)
	}
	freed := netip.MustParseAddr("10.1.0.77")
	delete(used, freed)
	if got, err := Next(p, cursor, uint64(len(used)), used.inUse); err != nil || got != freed {
		t.Fatalf("after freeing %s got %s, %v", freed, got, err)
	}
}
