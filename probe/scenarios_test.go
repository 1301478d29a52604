package probe

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// expectedServiceFile holds a scenario's tables through its Services.
const expectedServiceFile = "expected-service.txt"

// loadScenario reads a scenario directory: its pods, its Services and its
// expected tables, expected.txt and, exactly when it declares Services,
// expected-service.txt.
func loadScenario(t *testing.T, dir string) ([]Pod, []Service, Table) {
	t.Helper()
	pods, _, err := LoadPods(dir)
	if err != nil {
		t.Fatal(err)
	}
	svcs, _, err := LoadServices(dir)
	if err != nil {
		t.Fatal(err)
	}
	expected := readExpected(t, dir)
	_, statErr := os.Stat(filepath.Join(dir, expectedServiceFile))
	switch hasTable := statErr == nil; {
	case len(svcs) > 0 && !hasTable:
		t.Fatalf("%s declares Services: derive their tables in %s", dir, expectedServiceFile)
	case len(svcs) == 0 && hasTable:
		t.Fatalf("%s has %s but declares no Service with a ClusterIP", dir, expectedServiceFile)
	}
	return pods, svcs, expected
}

// readExpected reads dir's expected.txt and, when there is one, its
// expected-service.txt, as one table.
func readExpected(t *testing.T, dir string) Table {
	t.Helper()
	var expected Table
	for _, name := range []string{"expected.txt", expectedServiceFile} {
		text, err := os.ReadFile(filepath.Join(dir, name))
		if name == expectedServiceFile && errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		tab, err := ParseTable(string(text))
		if err != nil {
			t.Fatalf("%s/%s: %v", dir, name, err)
		}
		for _, b := range tab.Blocks {
			if b.Service != (name == expectedServiceFile) {
				t.Fatalf("%s/%s: block %s belongs in the other file", dir, name, b.Heading())
			}
		}
		expected.Blocks = append(expected.Blocks, tab.Blocks...)
	}
	return expected
}

// TestScenarioFiles checks, without probing, that every scenario loads,
// that its expected tables parse and name exactly its pods as rows and its
// pods or Services as columns, and that each Service has a ClusterIP of
// both families: a typo in a hand-written table fails here, not as a
// puzzling mismatch in the privileged run.
func TestScenarioFiles(t *testing.T) {
	dirs, err := filepath.Glob(filepath.Join("testdata", "scenarios", "*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no scenarios (%v)", err)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			pods, svcs, expected := loadScenario(t, dir)
			podNames := map[string]bool{}
			for _, p := range pods {
				podNames[p.Key()] = true
			}
			svcNames := map[string]bool{}
			for _, s := range svcs {
				svcNames[s.Key()] = true
				if !s.ClusterIPs[0].IsValid() || !s.ClusterIPs[1].IsValid() {
					t.Errorf("service %s has ClusterIPs %v: give it one of each family", s.Key(), s.ClusterIPs)
				}
			}
			for _, b := range expected.Blocks {
				cols := podNames
				if b.Service {
					cols = svcNames
				}
				for _, to := range b.To {
					if !cols[to] {
						t.Errorf("%s: column %s is not in the manifests", b.Heading(), to)
					}
				}
				if len(b.From) != len(pods) {
					t.Errorf("%s: %d rows, the manifests have %d pods", b.Heading(), len(b.From), len(pods))
				}
				for _, from := range b.From {
					if !podNames[from] {
						t.Errorf("%s: row %s is not a pod of the manifests", b.Heading(), from)
					}
				}
			}
		})
	}
}

// untranslated explains a table through Services where nothing got
// through: when the expected tables have cells answered or refused and
// the actual ones none, the dataplane did not translate the Services (a
// ClusterIP it leaves alone is routed out of the node and lost). It is ""
// otherwise.
func untranslated(expected, actual Table) string {
	reached := func(t Table) bool {
		for _, b := range t.Blocks {
			for _, row := range b.Cells {
				if b.Service && strings.ContainsAny(string(row), string([]byte{CellAllowed, CellPartial, CellRefused})) {
					return true
				}
			}
		}
		return false
	}
	if !reached(expected) || reached(actual) {
		return ""
	}
	return "no connection to a ClusterIP was answered or refused: this dataplane did not translate the Services\n"
}

func TestUntranslated(t *testing.T) {
	parse := func(text string) Table {
		tab, err := ParseTable(text)
		if err != nil {
			t.Fatal(err)
		}
		return tab
	}
	expected := parse("80/TCP  x/a\nx/a  -\nx/b  .\n\nsvc:80/TCP  x/web\nx/a  .\nx/b  R\n")
	for _, tc := range []struct {
		name, actual string
		hint         bool
	}{
		{"nothing through the Services", "80/TCP  x/a\nx/a  -\nx/b  .\n\nsvc:80/TCP  x/web\nx/a  X\nx/b  X\n", true},
		{"one refusal", "svc:80/TCP  x/web\nx/a  X\nx/b  R\n", false},
		{"one partial", "svc:80/TCP  x/web\nx/a  ~\nx/b  X\n", false},
	} {
		if got := untranslated(expected, parse(tc.actual)) != ""; got != tc.hint {
			t.Errorf("%s: hint %v, want %v", tc.name, got, tc.hint)
		}
	}
	if untranslated(parse("svc:80/TCP  x/web\nx/a  X\n"), parse("svc:80/TCP  x/web\nx/a  X\n")) != "" {
		t.Error("a hint where nothing was expected to get through")
	}
}
