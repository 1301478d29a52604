package benchkit

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"strings"
	"testing"
)

func TestPreflight(t *testing.T) {
	for _, tc := range []struct {
		name       string
		err        error
		wantStatus int
		wantOK     bool
		wantOut    string
	}{
		{"help", flag.ErrHelp, 0, false, ""},
		{"bad flag", errors.New("flag provided but not defined: -x"), 2, false, "tool: flag provided but not defined: -x\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			status, ok := Preflight("tool", "it needs netns", tc.err, &out)
			if status != tc.wantStatus || ok != tc.wantOK || out.String() != tc.wantOut {
				t.Fatalf("Preflight = %d, %t, %q; want %d, %t, %q", status, ok, out.String(), tc.wantStatus, tc.wantOK, tc.wantOut)
			}
		})
	}
	var out bytes.Buffer
	status, ok := Preflight("tool", "it needs netns", nil, &out)
	if os.Geteuid() == 0 {
		if !ok || status != 0 || out.Len() != 0 {
			t.Fatalf("as root: Preflight = %d, %t, %q; want 0, true and silence", status, ok, out.String())
		}
	} else if ok || status != 1 || !strings.Contains(out.String(), "must run as root") {
		t.Fatalf("not root: Preflight = %d, %t, %q; want 1, false and why", status, ok, out.String())
	}
}
