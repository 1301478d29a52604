package bpfmaps

import (
	"slices"
	"testing"
)

// TestJoinBuckets: `lockstep maps` shows a bucketed rule as the ranges
// the agent wrote, the pieces of a range that spans buckets joined again.
func TestJoinBuckets(t *testing.T) {
	for _, tc := range []struct {
		name   string
		chunks map[uint16][]PortRange
		want   []PortRange
	}{
		{"one entry", map[uint16][]PortRange{0: {{80, 80}, {443, 443}}}, []PortRange{{80, 80}, {443, 443}}},
		{"buckets read out of order", map[uint16][]PortRange{
			0: nil,
			3: {{20480, 20600}},
			2: {{10, 10}, {16000, 16383}},
			1: {{1, 1}},
		}, []PortRange{{1, 1}, {10, 10}, {16000, 16383}, {20480, 20600}}},
		{"a range across three", map[uint16][]PortRange{0: nil, 1: {{5, 15}}, 2: {{16, 31}}, 3: {{32, 40}}}, []PortRange{{5, 40}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := joinBuckets(tc.chunks); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
