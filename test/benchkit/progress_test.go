package benchkit

import (
	"fmt"
	"slices"
	"testing"
)

func TestProgressReportsEachTenth(t *testing.T) {
	for _, tc := range []struct {
		total int
		want  []string
	}{
		{20, []string{"x: 2/20", "x: 4/20", "x: 6/20", "x: 8/20", "x: 10/20", "x: 12/20", "x: 14/20", "x: 16/20", "x: 18/20", "x: 20/20"}},
		{3, []string{"x: 1/3", "x: 2/3", "x: 3/3"}}, // fewer steps than tenths: every step once
	} {
		var got []string
		p := NewProgress("x", tc.total, func(f string, a ...any) { got = append(got, fmt.Sprintf(f, a...)[2:]) })
		for range tc.total {
			p.Step()
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("total %d: reported %q, want %q", tc.total, got, tc.want)
		}
	}
}

func TestHasFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{[]string{"-benchtime", "10x"}, false},
		{[]string{"-count", "8"}, true},
		{[]string{"-count=8"}, true},
		{[]string{"-countx=8"}, false},
	} {
		if got := hasFlag(tc.args, "-count"); got != tc.want {
			t.Errorf("hasFlag(%q) = %v, want %v", tc.args, got, tc.want)
		}
	}
}
