//go:build linux

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

	"lockstep.dev/lockstep/internal/benchkit"
)

// facts describe the machine and build a run measured, so numbers from two
// runs can be told apart.
type facts struct {
	command    string
	date       string
	kernel     string
	cpus       string
	load       string
	goVersion  string
	lockstep   string
	tree       string
	refPlugins string
	stateFS    string
}

// gatherFacts records the machine and build. loadAtStart is /proc/loadavg's
// first three fields when the run started: other work on the machine shows
// up in the numbers, and this is the hint that it was there.
func gatherFacts(cfg config, binDir, workDir, loadAtStart string) facts {
	root, _ := benchkit.FindRepoRoot()
	f := facts{
		command:   benchkit.CommandLine("tools/cnibench", cfg.args, root),
		date:      time.Now().UTC().Format("2006-01-02 15:04 UTC"),
		kernel:    "unknown",
		cpus:      fmt.Sprintf("%d", runtime.NumCPU()),
		goVersion: runtime.Version(),
		lockstep:  "unknown",
		stateFS:   filesystemType(workDir),
		load:      loadAtStart,
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
	f.tree = "unknown"
	if root != "" {
		if out, err := exec.Command("git", "-C", root, "describe", "--tags", "--always", "--dirty").Output(); err == nil {
			f.tree = strings.TrimSpace(string(out))
		}
	}
	f.refPlugins = "containernetworking-plugins"
	if out, err := exec.Command("dpkg-query", "-W", "-f", "${Version}", "containernetworking-plugins").Output(); err == nil && len(out) > 0 {
		f.refPlugins += " " + strings.TrimSpace(string(out))
	}
	f.refPlugins += " in `" + benchkit.DisplayPath(cfg.refPlugins, root) + "`"
	return f
}

// filesystemType returns the type of the filesystem holding path, from the
// longest mount point in /proc/self/mountinfo that contains it.
func filesystemType(path string) string {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	best, fsType := -1, "unknown"
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, postFields := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(postFields) < 1 {
			continue
		}
		mount := unescapeMount(fields[4])
		if !benchkit.Within(path, mount) || len(mount) <= best {
			continue
		}
		best, fsType = len(mount), postFields[0]
	}
	return fsType
}

// unescapeMount undoes mountinfo's octal escapes of space, tab, newline and
// backslash.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}
