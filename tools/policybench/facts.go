//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"lockstep.dev/lockstep/internal/benchkit"
)

// facts describe the machine and build a run measured, so numbers from two
// runs can be told apart.
type facts struct {
	command   string
	date      string
	kernel    string
	cpus      string
	load      string
	goVersion string
	lockstep  string
	tree      string
	iperf     string
}

// gatherFacts records the machine and build; loadAtStart is /proc/loadavg's
// first three fields when the run started.
func gatherFacts(cfg config, binDir, loadAtStart string) facts {
	root, _ := benchkit.FindRepoRoot()
	f := facts{
		command:   benchkit.CommandLine("tools/policybench", cfg.args, root),
		date:      time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		kernel:    "unknown",
		cpus:      fmt.Sprintf("%d", runtime.NumCPU()),
		load:      loadAtStart,
		goVersion: runtime.Version(),
		lockstep:  "unknown",
		tree:      "unknown",
		iperf:     "unknown",
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		f.kernel = strings.TrimSpace(string(b))
	}
	if model := benchkit.CPUModel(); model != "" {
		f.cpus += " × " + model
	}
	if out, err := exec.Command(filepath.Join(binDir, "lockstep"), "version").Output(); err == nil {
		f.lockstep = strings.TrimSpace(string(out))
	}
	if root != "" {
		if out, err := exec.Command("git", "-C", root, "describe", "--tags", "--always", "--dirty").Output(); err == nil {
			f.tree = strings.TrimSpace(string(out))
		}
	}
	if out, err := exec.Command("iperf3", "--version").Output(); err == nil {
		if line, _, _ := strings.Cut(string(out), "\n"); line != "" {
			f.iperf = strings.TrimSpace(line)
		}
	}
	return f
}
