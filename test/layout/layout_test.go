package layout

import (
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// Order lists the top-level folders from the bottom up.
var Order = []string{"internal", "bpfmaps", "kube", "agent", "cni", "probe", "test", "cmd", "tools"}

const module = "lockstep.dev/lockstep/"

func folder(pkg string) string {
	top, _, _ := strings.Cut(strings.TrimPrefix(pkg, module), "/")
	return top
}

// violations reads `go list` lines ("package import import ...") and
// returns every import that reaches a folder above the package's own, and
// every package in a folder Order does not place.
func violations(lines []string) []string {
	var out []string
	for _, line := range lines {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		pkg := fields[0]
		from := slices.Index(Order, folder(pkg))
		if from < 0 {
			out = append(out, fmt.Sprintf("%s is in folder %q, which Order does not place", pkg, folder(pkg)))
			continue
		}
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, module) || folder(imp) == folder(pkg) {
				continue
			}
			if to := slices.Index(Order, folder(imp)); to > from || to < 0 {
				out = append(out, fmt.Sprintf("%s imports %s: %s must not import %s", strings.TrimPrefix(pkg, module), strings.TrimPrefix(imp, module), folder(pkg), folder(imp)))
			}
		}
	}
	return out
}

// TestImportsRunOneWay checks the imports of every package's own (non-test)
// files in the module, as built for Linux and for Windows (the HNS
// dataplane's files).
func TestImportsRunOneWay(t *testing.T) {
	for _, goos := range []string{"linux", "windows"} {
		cmd := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"...")
		cmd.Env = append(os.Environ(), "GOOS="+goos)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list (GOOS=%s): %v", goos, err)
		}
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		if len(lines) < 20 {
			t.Fatalf("go list (GOOS=%s) found %d packages, want the whole module", goos, len(lines))
		}
		for _, v := range violations(lines) {
			t.Errorf("GOOS=%s: %s", goos, v)
		}
	}
}

func TestViolations(t *testing.T) {
	tests := []struct {
		name  string
		lines []string
		want  int
	}{
		{"downwards", []string{module + "agent/endpoints " + module + "kube/client fmt " + module + "internal/ops"}, 0},
		{"within a folder", []string{module + "agent/endpoints " + module + "agent/store"}, 0},
		{"upwards", []string{module + "agent/endpoints " + module + "cmd/lockstep"}, 1},
		{"two folders that import each other", []string{module + "kube/x " + module + "agent/y", module + "agent/y " + module + "kube/z"}, 1},
		{"a folder Order does not know", []string{module + "misc/x fmt"}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := violations(tt.lines); len(got) != tt.want {
				t.Errorf("violations = %q, want %d", got, tt.want)
			}
		})
	}
}
