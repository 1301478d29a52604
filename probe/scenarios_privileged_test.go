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

	"lockstep.dev/lockstep/agent/manifests"
	"lockstep.dev/lockstep/test/testenv"
)

// TestPrivilegedProbeScenarios probes every scenario under
// testdata/scenarios on every Linux dataplane, over IPv4 and over IPv6
// (dual-stack pods), and compares the tables with its hand-derived
// expected.txt, cell by cell: the eBPF and iptables dataplanes must agree
// with the API documentation, and so with each other, in both families.
// A scenario with ipBlock peers pins an address of each family and names
// blocks of each, so that one expected table holds for both. A scenario
// with Services is probed through them too, and its tables through the
// Services are expected-service.txt; its Services have a ClusterIP of
// each family, so that one table holds for both.
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
	pods, svcs, expected := loadScenario(t, dir)
	manifests, err := filepath.Abs(dir)
	if err != nil {
		t.Fatal(err)
	}
	// A scenario with an edit/ directory goes on: its manifests replace
	// the scenario's while the pods run, and the table must become
	// edit/expected.txt. The agent follows a copy, so the edit stays out
	// of the source tree.
	editDir := filepath.Join(dir, "edit")
	var expectedAfter *Table // nil: no edit
	if _, err := os.Stat(editDir); err == nil {
		e := readExpected(t, editDir)
		expectedAfter = &e
		manifests = t.TempDir()
		copyManifest(t, filepath.Join(dir, "manifests.yaml"), manifests)
	}
	var progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := Config{Binary: bin, Manifests: manifests, Pods: pods, Services: svcs, Dataplane: dataplane, Family: family, Progress: &progress}
	var after *Report
	if expectedAfter != nil {
		cfg.Then = func(ctx context.Context, first *Report, reprobe func(context.Context) (*Report, error)) error {
			if len(CompareTables(expected, first.Table())) > 0 {
				return nil // reported below; the edit would prove nothing
			}
			copyManifest(t, filepath.Join(editDir, "manifests.yaml"), manifests)
			// The agent applies the edit within milliseconds of reading
			// it; reading it waits for a file event.
			for deadline := time.Now().Add(20 * time.Second); ; {
				rep, err := reprobe(ctx)
				if err != nil {
					return err
				}
				after = rep
				if len(CompareTables(*expectedAfter, rep.Table())) == 0 || time.Now().After(deadline) {
					return nil
				}
			}
		}
	}
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("%v\nprogress:\n%s", err, progress.String())
	}
	checkTable(t, dir, expected, rep.Table(), &progress)
	checkExplained(t, dir, rep)
	if expectedAfter != nil && after != nil {
		checkTable(t, editDir, *expectedAfter, after.Table(), &progress)
		checkExplained(t, editDir, after)
	}
}

// checkExplained compares, cell by cell, what explain says of every
// connection (on the manifests of dir, with the addresses the pods got),
// by pod address and through each Service's ClusterIP, with what the
// packets did.
func checkExplained(t *testing.T, dir string, rep *Report) {
	t.Helper()
	objs, err := manifests.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := rep.Explain(SnapshotOf(objs, rep)); err != nil {
		t.Fatal(err)
	}
	if ms := CompareTables(rep.ExplainedTable(), rep.Table()); len(ms) > 0 {
		lines := make([]string, len(ms))
		for i, m := range ms {
			lines[i] = "  " + strings.Replace(m.String(), "expected", "explain says", 1) + ": " + reasonOf(rep, m)
		}
		t.Errorf("explain disagrees with the packets on the manifests of %s in %d cells:\n%s", dir, len(ms), strings.Join(lines, "\n"))
	}
}

// copyManifest writes src into dir as manifests.yaml, atomically, as an
// editor or a config management tool would.
func copyManifest(t *testing.T, src, dir string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, ".manifests.yaml.tmp")
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, "manifests.yaml")); err != nil {
		t.Fatal(err)
	}
}

func checkTable(t *testing.T, dir string, expected, actual Table, progress *bytes.Buffer) {
	t.Helper()
	if mismatches := CompareTables(expected, actual); len(mismatches) > 0 {
		lines := make([]string, len(mismatches))
		for i, m := range mismatches {
			lines[i] = "  " + m.String()
		}
		t.Errorf("%d cells differ from the tables of %s:\n%s\n%s\nactual:\n%s\nprogress:\n%s",
			len(mismatches), dir, strings.Join(lines, "\n"), untranslated(expected, actual), actual, progress.String())
	}
	if n := actual.Count(CellUnprobeable); n > 0 {
		t.Logf("%d cells could not be probed ('?'), e.g. SCTP on a kernel without it", n)
	}
}
