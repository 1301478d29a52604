package dashboard

import (
	"maps"
	"slices"
	"strings"
	"testing"
)

// TestWrittenFamilies reads a file that writes a family in each form the
// scan knows, and one it cannot read, which must be reported.
func TestWrittenFamilies(t *testing.T) {
	fams, err := writtenFamilies("testdata/scan")
	if err == nil || !strings.Contains(err.Error(), "metrics.go:35: a *ast.CallExpr") {
		t.Errorf("error %v, want one naming metrics.go:35, the computed name", err)
	}
	want := map[string]string{
		"scan_registered_total": "counter",
		"scan_constant":         "histogram",
		"scan_literal":          "gauge",
		"scan_helper_a":         "gauge",
		"scan_helper_b":         "gauge",
		"scan_table_a":          "counter",
		"scan_table_b":          "counter",
	}
	got := map[string]string{}
	for n, f := range fams {
		got[n] = f.typ
	}
	if !maps.Equal(got, want) {
		t.Errorf("families %v,\nwant %v", got, want)
	}
}

// TestLockstepFamilies: the scan reads every family of lockstep's own
// code, and finds the ones of each writer (a floor, not the list: the
// dashboard test compares the list with the dashboard).
func TestLockstepFamilies(t *testing.T) {
	fams, err := writtenFamilies(codeDirs...)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{
		"lockstep_api_requests_total",     // agent/server, registered
		"lockstep_datapath_packets_total", // the eBPF dataplane, at scrape time
		"lockstep_iptables_objects",       // the iptables dataplane
		"lockstep_identities",             // agent, from a table
		"lockstep_operator_leader",        // the operator
		"process_resident_memory_bytes",   // promtext's process metrics, through a helper
	} {
		if _, ok := fams[name]; !ok {
			t.Errorf("the scan misses %s; found %v", name, slices.Sorted(maps.Keys(fams)))
		}
	}
}
