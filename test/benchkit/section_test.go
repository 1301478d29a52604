package benchkit

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSectionSplice(t *testing.T) {
	s := Section{Tool: "b", After: "a", Intro: "# Intro\n"}
	a := Section{Tool: "a"}
	text := s.Begin() + "\nNEW\n" + s.End() + "\n"
	for _, tc := range []struct{ name, old, want string }{
		{"an empty file gets the intro", "", "# Intro\n\n" + text},
		{"replaced in place, the rest survives",
			"# B\n\nbefore\n" + s.Begin() + "\nOLD\n" + s.End() + "\nafter\n",
			"# B\n\nbefore\n" + text + "after\n"},
		{"first inserted after its predecessor",
			"# B\n\n" + a.Begin() + "\nA\n" + a.End() + "\n\n## Hand\n",
			"# B\n\n" + a.Begin() + "\nA\n" + a.End() + "\n\n" + text + "\n## Hand\n"},
		{"appended when the predecessor is missing", "# B\n\nother\n\n\n", "# B\n\nother\n\n" + text},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.Splice([]byte(tc.old), text)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

func TestSectionSpliceRefusesBrokenMarkers(t *testing.T) {
	s := Section{Tool: "b"}
	for _, old := range []string{
		"# B\n" + s.Begin() + "\nno end\n",
		"# B\n" + s.End() + "\nno begin\n",
		"# B\n" + s.End() + "\n" + s.Begin() + "\n",
	} {
		if _, err := s.Splice([]byte(old), "x"); err == nil || !strings.Contains(err.Error(), "out of order") {
			t.Errorf("Splice(%q) = %v; want the broken markers named", old, err)
		}
	}
}

func TestSectionWriteKeepsOtherSections(t *testing.T) {
	path := filepath.Join(t.TempDir(), "BENCH.md")
	a, b := Section{Tool: "a", Intro: "# Bench\n"}, Section{Tool: "b", After: "a"}
	for _, step := range []struct {
		s    Section
		text string
	}{
		{a, a.Begin() + "\na1\n" + a.End() + "\n"},
		{b, b.Begin() + "\nb1\n" + b.End() + "\n"},
		{a, a.Begin() + "\na2\n" + a.End() + "\n"},
	} {
		if err := step.s.Write(path, step.text, nil); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := "# Bench\n\n" + a.Begin() + "\na2\n" + a.End() + "\n\n" + b.Begin() + "\nb1\n" + b.End() + "\n"
	if string(got) != want {
		t.Fatalf("got\n%q\nwant\n%q", got, want)
	}
}
