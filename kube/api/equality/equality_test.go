package equality

import (
	"testing"
	"time"
)

func TestSemanticDeepEqual(t *testing.T) {
	type inner struct {
		At *time.Time
		M  map[string]string
	}
	type obj struct {
		S   []string
		In  inner
		Any any
	}
	utc := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	local := utc.In(time.FixedZone("x", 3600))
	for _, tc := range []struct {
		name string
		a, b any
		want bool
	}{
		{"nil and empty slice", obj{S: nil}, obj{S: []string{}}, true},
		{"nil and empty map", obj{In: inner{M: nil}}, obj{In: inner{M: map[string]string{}}}, true},
		{"one instant, two zones", obj{In: inner{At: &utc}}, obj{In: inner{At: &local}}, true},
		{"nil and set time", obj{In: inner{At: &utc}}, obj{}, false},
		{"different element", obj{S: []string{"a"}}, obj{S: []string{"b"}}, false},
		{"different map value", obj{In: inner{M: map[string]string{"a": "b"}}}, obj{In: inner{M: map[string]string{"a": "c"}}}, false},
		{"different types", 1, int64(1), false},
		{"interface of different types", obj{Any: 1}, obj{Any: "1"}, false},
		{"nil and nil", nil, nil, true},
	} {
		if got := Semantic.DeepEqual(tc.a, tc.b); got != tc.want {
			t.Errorf("%s: DeepEqual = %v, want %v", tc.name, got, tc.want)
		}
	}
}
