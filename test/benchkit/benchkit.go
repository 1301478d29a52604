package benchkit

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// ModulePath is the module the benchmark tools measure.
const ModulePath = "lockstep.dev/lockstep"

// FindRepoRoot walks up from the working directory to the directory whose
// go.mod declares ModulePath.
func FindRepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("get working directory: %w", err)
	}
	for {
		if isLockstepModule(filepath.Join(dir, "go.mod")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find the lockstep repository: run the benchmark from inside it (make bench)")
		}
		dir = parent
	}
}

func isLockstepModule(goMod string) bool {
	f, err := os.Open(goMod)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if mod, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
			return strings.Trim(strings.TrimSpace(mod), `"`) == ModulePath
		}
	}
	return false
}

// CPUModel returns the first "model name" of /proc/cpuinfo, or "".
func CPUModel() string {
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

// LoadAverage returns the 1, 5 and 15 minute load averages, or "unknown".
func LoadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// CommandLine renders `go run ./TOOL ARGS...` with every path shown by
// DisplayPath, so that no path of this machine ends up in a committed file.
func CommandLine(tool string, args []string, repoRoot string) string {
	parts := []string{"go run ./" + tool}
	for _, a := range args {
		if name, val, ok := strings.Cut(a, "="); ok && strings.HasPrefix(name, "-") {
			a = name + "=" + DisplayPath(val, repoRoot)
		} else {
			a = DisplayPath(a, repoRoot)
		}
		if strings.ContainsAny(a, " \t'\"") {
			a = fmt.Sprintf("%q", a)
		}
		parts = append(parts, a)
	}
	return strings.Join(parts, " ")
}

// DisplayPath shows an absolute path relative to the repository when it
// lies inside it, as is when it is a system location (/usr, /opt), and as
// …/BASE otherwise. Anything not an absolute path is returned unchanged.
func DisplayPath(p, repoRoot string) string {
	if !filepath.IsAbs(p) {
		return p
	}
	clean := filepath.Clean(p)
	if repoRoot != "" && Within(clean, repoRoot) {
		if rel, err := filepath.Rel(repoRoot, clean); err == nil {
			return rel
		}
	}
	if Within(clean, "/usr") || Within(clean, "/opt") {
		return clean
	}
	return "…/" + filepath.Base(clean)
}

// Within reports whether path is dir or lies below it.
func Within(path, dir string) bool {
	if dir == "/" {
		return true
	}
	return path == dir || strings.HasPrefix(path, dir+"/")
}

// Percentile returns the nearest-rank p-th percentile of d (the smallest
// value with at least p% of the values at or below it; with 300 values p99
// is the 297th). d is not modified.
func Percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	sorted := d
	if !slices.IsSorted(d) {
		sorted = slices.Clone(d)
		slices.Sort(sorted)
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// FmtDur renders a duration in milliseconds, the unit every table uses.
func FmtDur(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case ms >= 100:
		return fmt.Sprintf("%.0f ms", ms)
	case ms >= 10:
		return fmt.Sprintf("%.1f ms", ms)
	}
	return fmt.Sprintf("%.2f ms", ms)
}
