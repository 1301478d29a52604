package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
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
	root, _ := findRepoRoot()
	f := facts{
		command:   commandLine(cfg.args, root),
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
	if model := cpuModel(); model != "" {
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

// cpuModel returns the first "model name" of /proc/cpuinfo.
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if key, val, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(key) == "model name" {
			return strings.TrimSpace(val)
		}
	}
	return ""
}

// commandLine renders the command that was run, with paths inside the
// repository made relative and others shortened to …/BASE, so that no
// path of this machine ends up in the committed file.
func commandLine(args []string, repoRoot string) string {
	parts := []string{"go run ./tools/policybench"}
	for _, a := range args {
		if name, val, ok := strings.Cut(a, "="); ok && strings.HasPrefix(name, "-") {
			a = name + "=" + displayPath(val, repoRoot)
		} else {
			a = displayPath(a, repoRoot)
		}
		if strings.ContainsAny(a, " \t'\"") {
			a = fmt.Sprintf("%q", a)
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

func displayPath(p, repoRoot string) string {
	if !filepath.IsAbs(p) {
		return p
	}
	clean := filepath.Clean(p)
	if repoRoot != "" {
		if rel, err := filepath.Rel(repoRoot, clean); err == nil && !strings.HasPrefix(rel, "..") {
			return rel
		}
	}
	return "…/" + filepath.Base(clean)
}

// loadAverage returns the 1, 5 and 15 minute load averages, or "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}
