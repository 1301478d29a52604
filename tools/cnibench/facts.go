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
	root, _ := findRepoRoot()
	f := facts{
		command:   commandLine(cfg.args, root),
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
	if model := cpuModel(); model != "" {
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
	f.refPlugins += " in `" + displayPath(cfg.refPlugins, root) + "`"
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
		if !within(path, mount) || len(mount) <= best {
			continue
		}
		best, fsType = len(mount), postFields[0]
	}
	return fsType
}

// within reports whether path is dir or lies below it.
func within(path, dir string) bool {
	if dir == "/" {
		return true
	}
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// unescapeMount undoes mountinfo's octal escapes of space, tab, newline and
// backslash.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	return strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`).Replace(s)
}

// commandLine renders the command that was run. Paths are shown relative to
// the repository, or shortened, so that no path of this machine ends up in
// the committed file.
func commandLine(args []string, repoRoot string) string {
	parts := []string{"go run ./tools/cnibench"}
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

// displayPath shows an absolute path relative to the repository when it lies
// inside it, as is when it is a system location (/usr, /opt), and as
// …/BASE otherwise. Anything not an absolute path is returned unchanged.
func displayPath(p, repoRoot string) string {
	if !filepath.IsAbs(p) {
		return p
	}
	clean := filepath.Clean(p)
	if repoRoot != "" && within(clean, repoRoot) {
		if rel, err := filepath.Rel(repoRoot, clean); err == nil {
			return rel
		}
	}
	if within(clean, "/usr") || within(clean, "/opt") {
		return clean
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
