package intstr

import (
	"encoding/json"
	"testing"
)

func TestJSON(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want IntOrString
		err  bool
	}{
		{in: `8080`, want: FromInt32(8080)},
		{in: `"http"`, want: FromString("http")},
		{in: `"8080"`, want: FromString("8080")},
		{in: `true`, err: true},
		{in: `1.5`, err: true},
	} {
		var got IntOrString
		err := json.Unmarshal([]byte(tc.in), &got)
		if (err != nil) != tc.err {
			t.Fatalf("read %s: error %v, want error %v", tc.in, err, tc.err)
		}
		if tc.err {
			continue
		}
		if got != tc.want {
			t.Errorf("read %s = %+v, want %+v", tc.in, got, tc.want)
		}
		out, err := json.Marshal(got)
		if err != nil || string(out) != tc.in {
			t.Errorf("write %+v = %s, %v; want %s", got, out, err, tc.in)
		}
	}
	v := FromString("42")
	if v.IntValue() != 42 || v.String() != "42" {
		t.Errorf("FromString(42): IntValue %d, String %q", v.IntValue(), v.String())
	}
}
