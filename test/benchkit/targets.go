package benchkit

import (
	"fmt"
	"strings"
)

// Target is one benchmark target of an issue and how this run did.
type Target struct {
	Name     string // the target, e.g. "ADD p50 ≤ 2 ms"
	Measured string // what this run measured
	Pass     bool
}

// TargetsTable renders targets under a "### Targets (P/N pass)" heading
// as a markdown table, a failure in bold.
func TargetsTable(targets []Target) string {
	passed := 0
	for _, t := range targets {
		if t.Pass {
			passed++
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "### Targets (%d/%d pass)\n\n| target | measured | result |\n|---|---|---|\n", passed, len(targets))
	for _, t := range targets {
		result := "**FAIL**"
		if t.Pass {
			result = "PASS"
		}
		fmt.Fprintf(&b, "| %s | %s | %s |\n", t.Name, t.Measured, result)
	}
	return b.String()
}
