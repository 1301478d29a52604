//go:build linux

package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"lockstep.dev/lockstep/test/benchkit"
)

// facts describe the machine and build a run measured, and what cnibench
// compared lockstep with.
type facts struct {
	benchkit.Machine
	refPlugins string
	stateFS    string
}

// gatherFacts records the machine and build. loadAtStart is /proc/loadavg's
// first three fields when the run started: other work on the machine shows
// up in the numbers, and this is the hint that it was there.
func gatherFacts(cfg config, binDir, workDir, loadAtStart string) facts {
	root, _ := benchkit.FindRepoRoot()
	f := facts{
		Machine:    benchkit.GatherMachine("tools/cnibench", cfg.args, binDir, loadAtStart),
		refPlugins: "containernetworking-plugins",
		stateFS:    filesystemType(workDir),
	}
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
