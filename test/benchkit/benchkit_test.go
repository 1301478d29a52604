package benchkit

import (
	"testing"
	"time"
)

func TestPercentileNearestRank(t *testing.T) {
	var d []time.Duration
	for i := 300; i >= 1; i-- { // unsorted on purpose
		d = append(d, time.Duration(i))
	}
	tests := []struct {
		p    float64
		want time.Duration
	}{{50, 150}, {99, 297}, {100, 300}, {0, 1}}
	for _, tc := range tests {
		if got := Percentile(d, tc.p); got != tc.want {
			t.Errorf("p%v = %d, want %d", tc.p, got, tc.want)
		}
	}
	if d[0] != 300 {
		t.Error("Percentile sorted its input")
	}
}

func TestDisplayPath(t *testing.T) {
	tests := []struct{ in, want string }{
		{"/repo/bin", "bin"},
		{"/usr/lib/cni", "/usr/lib/cni"},
		{"/home/someone/x/BENCH.md", "…/BENCH.md"},
		{"bin", "bin"},
		{"/repository", "…/repository"}, // a sibling sharing the prefix is not inside
	}
	for _, tc := range tests {
		if got := DisplayPath(tc.in, "/repo"); got != tc.want {
			t.Errorf("DisplayPath(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
