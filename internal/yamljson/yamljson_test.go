package yamljson

import (
	"reflect"
	"strings"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	type inner struct {
		LastApplyError string `json:"lastApplyError"`
	}
	type doc struct {
		Name    string            `json:"name"`
		Count   uint64            `json:"count"`
		Flag    bool              `json:"flag"`
		Labels  map[string]string `json:"labels"`
		Inner   inner             `json:"inner"`
		Empty   []string          `json:"empty"`
		Numeric string            `json:"numeric"`
	}
	in := doc{
		Name: "a", Count: 1<<63 + 5, Flag: true,
		Labels:  map[string]string{"on": "no", "y": "true"},
		Inner:   inner{LastApplyError: "compile: x"},
		Empty:   []string{},
		Numeric: "0123",
	}
	y, err := Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(y), "{") {
		t.Errorf("Marshal wrote flow style:\n%s", y)
	}
	var out doc
	if err := Unmarshal(y, &out); err != nil {
		t.Fatalf("Unmarshal(%s): %v", y, err)
	}
	if !reflect.DeepEqual(in, out) {
		t.Errorf("round trip = %+v, want %+v\n%s", out, in, y)
	}
}

func TestToJSON(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		err            bool
	}{
		{name: "empty", in: "", want: ""},
		{name: "yaml 1.2 booleans", in: "a: on\nb: true\nc: no\n", want: `{"a":"on","b":true,"c":"no"}`},
		{name: "duplicate key", in: "a: 1\na: 2\n", err: true},
		{name: "not yaml", in: "a: [", err: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ToJSON([]byte(tc.in))
			if (err != nil) != tc.err {
				t.Fatalf("ToJSON(%q) error = %v, want error %v", tc.in, err, tc.err)
			}
			if string(got) != tc.want {
				t.Errorf("ToJSON(%q) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
}
