//go:build linux

package probe

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"lockstep.dev/lockstep/internal/testenv"
)

// TestPrivilegedProbeScenarios probes every scenario under
// testdata/scenarios on every Linux dataplane, over IPv4 and over IPv6
// (dual-stack pods), and compares the tables with its hand-derived
// expected.txt, cell by cell: the eBPF and iptables dataplanes must agree
// with the API documentation, and so with each other, in both families.
// A scenario with ipBlock peers pins an address of each family and names
// blocks of each, so that one expected table holds for both.
func TestPrivilegedProbeScenarios(t *testing.T) {
	testenv.Privileged(t)
	dirs, err := filepath.Glob(filepath.Join("testdata", "scenarios", "*"))
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) == 0 {
		t.Fatal("no scenarios under testdata/scenarios")
	}
	bin := builtBinary(t)
	for _, family := range []string{IPv4, IPv6} {
		for _, dataplane := range []string{"ebpf", "iptables"} {
			t.Run(family+"/"+dataplane, func(t *testing.T) {
				for _, dir := range dirs {
					t.Run(filepath.Base(dir), func(t *testing.T) {
						runScenario(t, bin, dir, dataplane, family)
					})
				}
			})
		}
	}
}

func runScenario(t *testing.T, bin, dir, dataplane, family string) {
	text, err := os.ReadFile(filepath.Join(dir, "expected.txt"))
	if err != nil {
		t.Fatal(err)
	}
	expected, err := ParseTable(string(text))
	if err != nil {
		t.Fatalf("%s/expected.txt: %v", dir, err)
	}
	pods, _, err := LoadPods(dir)
	if err != nil {
		t.Fatal(err)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := Run(ctx, Config{Binary: bin, Manifests: abs, Pods: pods, Dataplane: dataplane, Family: family, Progress: &progress})
	if err != nil {
		t.Fatalf("%v\nprogress:\n%s", err, progress.String())
	}
	actual := rep.Table()
	if mismatches := CompareTables(expected, actual); len(mismatches) > 0 {
		lines := make([]string, len(mismatches))
		for i, m := range mismatches {
			lines[i] = "  " + m.String()
		}
		t.Errorf("%d cells differ from %s/expected.txt:\n%s\n\nactual:\n%s\nprogress:\n%s",
			len(mismatches), dir, strings.Join(lines, "\n"), actual, progress.String())
	}
	if n := actual.Count(CellUnprobeable); n > 0 {
		t.Logf("%d cells could not be probed ('?'), e.g. SCTP on a kernel without it", n)
	}
}
