package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"lockstep.dev/lockstep/probe"
)

// readExpected reads --expect FILE: tables as probe prints them, or a
// report as probe -o json writes it.
func readExpected(path string) (probe.Table, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return probe.Table{}, fmt.Errorf("read --expect file: %w", err)
	}
	if trimmed := bytes.TrimSpace(data); len(trimmed) > 0 && trimmed[0] == '{' {
		var rep probe.Report
		if err := json.Unmarshal(trimmed, &rep); err != nil {
			return probe.Table{}, fmt.Errorf("parse --expect %s as probe's JSON: %w", path, err)
		}
		return rep.Table(), nil
	}
	t, err := probe.ParseTable(string(data))
	if err != nil {
		return probe.Table{}, fmt.Errorf("parse --expect %s: %w (want tables as lockstep probe prints them, or its -o json)", path, err)
	}
	if len(t.Blocks) == 0 {
		return probe.Table{}, fmt.Errorf("parse --expect %s: no table in it (want tables as lockstep probe prints them, or its -o json)", path)
	}
	return t, nil
}

// errTableDiffers is --expect's verdict when cells differ; the cells are
// printed before it.
type errTableDiffers struct {
	path string
	n    int
}

func (e errTableDiffers) Error() string {
	return fmt.Sprintf("the tables differ from %s in %d cells", e.path, e.n)
}

// checkExpected compares the probe's tables with the expected ones and
// writes the differing cells to w, or that they match.
func checkExpected(w io.Writer, path string, expected, actual probe.Table) error {
	ms := probe.CompareTables(expected, actual)
	if len(ms) == 0 {
		fmt.Fprintf(w, "matches %s\n", path)
		return nil
	}
	fmt.Fprintf(w, "%d cells differ from %s:\n", len(ms), path)
	rows := [][]string{{"FROM", "TO", "PORT", "EXPECTED", "GOT"}}
	for _, m := range ms {
		b := probe.Block{Port: m.Port, Service: m.Service}
		rows = append(rows, []string{m.From, m.To, b.Heading(), cellText(m.Expected), cellText(m.Actual)})
	}
	writeColumns(w, rows)
	return errTableDiffers{path: path, n: len(ms)}
}

func cellText(c byte) string {
	if c == 0 {
		return "(none)"
	}
	return string(c)
}

// writeReasons prints every result, by pod address and through Services,
// with explain's reason, marking where explain and the packets disagree.
func writeReasons(w io.Writer, rep *probe.Report) {
	fmt.Fprintln(w)
	rows := [][]string{{"PORT", "FROM", "TO", "GOT", "REASON"}}
	for _, r := range rep.Results {
		got := "?"
		if r.Allowed != nil {
			got = "X"
			if *r.Allowed {
				got = "."
			}
		}
		reason := r.Reason
		if got != "?" && r.Explained != "" && (got == ".") != (r.Explained == "allow") {
			reason = "EXPLAIN SAYS " + strings.ToUpper(r.Explained) + ": " + reason
		}
		rows = append(rows, []string{probe.Port{Port: r.Port, Protocol: r.Protocol}.String(), r.From, r.To, got, reason})
	}
	for _, r := range rep.ServiceResults {
		got := string(r.Outcome.Cell())
		reason := r.Reason
		if got != "?" && r.Explained != "" && r.Explained != r.Outcome {
			reason = "EXPLAIN SAYS " + strings.ToUpper(string(r.Explained)) + ": " + reason
		}
		b := probe.Block{Port: probe.Port{Port: r.Port, Protocol: r.Protocol}, Service: true}
		rows = append(rows, []string{b.Heading(), r.From, r.Service, got, reason})
	}
	writeColumns(w, rows)
}

// writeColumns aligns rows with two spaces between columns.
func writeColumns(w io.Writer, rows [][]string) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, row := range rows {
		fmt.Fprintln(tw, strings.Join(row, "\t"))
	}
	_ = tw.Flush()
}
