//go:build linux

package main

import (
	"strings"
	"testing"
)

func TestSpliceSection(t *testing.T) {
	section := beginMarker + "\nnew\n" + endMarker + "\n"
	for _, tc := range []struct{ name, old, want string }{
		{"after cnibench", "# B\n\n<!-- cnibench:begin -->\nc\n<!-- cnibench:end -->\n\n## Hand\n",
			"# B\n\n<!-- cnibench:begin -->\nc\n<!-- cnibench:end -->\n\n" + section + "\n## Hand\n"},
		{"replaced in place", "# B\n\n" + beginMarker + "\nold\n" + endMarker + "\n\n## Hand\n",
			"# B\n\n" + section + "\n## Hand\n"},
		{"appended", "# B\n", "# B\n\n" + section},
		{"new file", "", section},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := spliceSection([]byte(tc.old), section)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
	if _, err := spliceSection([]byte(endMarker+"\n"+beginMarker), section); err == nil || !strings.Contains(err.Error(), "out of order") {
		t.Errorf("markers out of order: got %v", err)
	}
}
