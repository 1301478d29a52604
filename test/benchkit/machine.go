package benchkit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// Machine describes the machine and the build a run measured, so numbers
// from two runs can be told apart. Every field is "unknown" when it could
// not be read.
type Machine struct {
	Command  string // how to rerun it, without this machine's paths
	Date     string
	Kernel   string
	CPUs     string
	Load     string // /proc/loadavg's first three fields when the run started
	Go       string
	Lockstep string // `lockstep version` of the binary measured
	Tree     string // git describe of the source tree
}

// GatherMachine records the machine and the build for tool (a path under
// tools/) run with args on the lockstep binary in binDir; loadAtStart is
// LoadAverage taken when the run started, since other work on the machine
// shows up in the numbers.
func GatherMachine(tool string, args []string, binDir, loadAtStart string) Machine {
	root, _ := FindRepoRoot()
	m := Machine{
		Command:  CommandLine(tool, args, root),
		Date:     time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		Kernel:   "unknown",
		CPUs:     fmt.Sprintf("%d", runtime.NumCPU()),
		Load:     loadAtStart,
		Go:       runtime.Version(),
		Lockstep: "unknown",
		Tree:     "unknown",
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if model := CPUModel(); model != "" {
		m.CPUs += " × " + model
	}
	if out, err := exec.Command(filepath.Join(binDir, "lockstep"), "version").Output(); err == nil {
		m.Lockstep = strings.TrimSpace(string(out))
	}
	if tree := SourceTree(root); tree != "" {
		m.Tree = tree
	}
	return m
}

// SourceTree is `git describe` of the repository at root (dirty marked),
// or "" when it cannot tell.
func SourceTree(root string) string {
	if root == "" {
		return ""
	}
	out, err := exec.Command("git", "-C", root, "describe", "--tags", "--always", "--dirty").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// Rows are m as the rows of a two-column markdown table, extra rows
// (tool-specific facts) last.
func (m Machine) Rows(extra ...[2]string) [][2]string {
	rows := [][2]string{
		{"command", "`" + m.Command + "`"},
		{"date", m.Date},
		{"kernel", m.Kernel},
		{"CPUs (nproc)", m.CPUs},
		{"load average at start (1, 5, 15 min)", m.Load},
		{"Go", m.Go},
		{"lockstep", m.Lockstep},
		{"source tree (git describe)", m.Tree},
	}
	return append(rows, extra...)
}

// Table renders rows as a markdown table without a header.
func Table(rows [][2]string) string {
	var b strings.Builder
	b.WriteString("| | |\n|---|---|\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s | %s |\n", r[0], r[1])
	}
	return b.String()
}
