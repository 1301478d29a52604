package client

import "testing"

func TestWarningText(t *testing.T) {
	for _, tc := range []struct{ header, want string }{
		{`299 - "v1 Thing is deprecated"`, "v1 Thing is deprecated"},
		{`299 - "a \"quoted\" word" "Sat, 01 Jan 2000 00:00:00 GMT"`, `a "quoted" word`},
		{`199 agent "miscellaneous"`, "miscellaneous"},
		{`299 - "unterminated`, `299 - "unterminated`},
		{`not a warning`, `not a warning`},
		{`2x9 - "code not a number"`, `2x9 - "code not a number"`},
		{``, ``},
	} {
		if got := warningText(tc.header); got != tc.want {
			t.Errorf("warningText(%q) = %q, want %q", tc.header, got, tc.want)
		}
	}
}
