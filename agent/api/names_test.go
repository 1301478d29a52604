package api

import (
	"strings"
	"testing"
)

func TestHostIfName(t *testing.T) {
	a := HostIfName("0123456789abcdef", "eth0")
	if len(a) != 14 || !strings.HasPrefix(a, HostIfPrefix) || !IsHostIfName(a) {
		t.Fatalf("HostIfName() = %q, want %q and 12 hex digits", a, HostIfPrefix)
	}
	if again := HostIfName("0123456789abcdef", "eth0"); again != a {
		t.Fatalf("HostIfName() is not deterministic: %q then %q", a, again)
	}
	for _, other := range []string{HostIfName("0123456789abcdef", "net1"), HostIfName("0123456789abcdee", "eth0")} {
		if other == a {
			t.Fatalf("HostIfName() gives %q for two attachments", a)
		}
	}
}

func TestIsHostIfName(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{HostIfName("c", "eth0"), true},
		{"ls0123456789ab", true},
		{"ls0123456789a", false},
		{"ls0123456789abc", false},
		{"ls0123456789AB", false},
		{"lx0123456789ab", false},
		{"eth0", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := IsHostIfName(tt.name); got != tt.want {
			t.Errorf("IsHostIfName(%q) = %v, want %v", tt.name, got, tt.want)
		}
	}
}
