// Package scan is what TestWrittenFamilies reads: one family written in
// each form the scan knows, and one it cannot read.
package scan

import (
	"io"

	"lockstep.dev/lockstep/internal/promtext"
)

const constName = "scan_constant"

func register(reg *promtext.Registry) {
	reg.NewCounter("scan_registered_total", "A registered counter.", "label")
	reg.NewHistogram(constName, "A histogram named by a constant.", nil)
}

func write(w io.Writer, n int) {
	promtext.WriteHeader(w, "scan_literal", "A literal.", "gauge")
	gauge := func(name, help string, v float64) {
		promtext.WriteHeader(w, name, help, "gauge")
		promtext.WriteSample(w, name, v)
	}
	gauge("scan_helper_a", "Through a helper.", 1)
	gauge("scan_helper_b", "Through a helper.", 2)
	for _, g := range []struct {
		name, help string
		n          int
	}{
		{"scan_table_a", "From a table.", 1},
		{name: "scan_table_b", help: "From a keyed table.", n: 2},
	} {
		promtext.WriteHeader(w, g.name, g.help, "counter")
	}
	promtext.WriteHeader(w, pick(n), "Computed: the scan cannot read it.", "gauge")
}

func pick(n int) string { return []string{"a", "b"}[n] }
