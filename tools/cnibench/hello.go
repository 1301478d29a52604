//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"

	"lockstep.dev/lockstep/probe/nodesim"
)

// helloType is the plugin type of the hello-world reference.
const helloType = "cnibench-hello"

// helloName is the reference's display name.
const helloName = "static hello world"

// helloSource is the reference for starting a Go binary: a static hello
// world whose greeting is a CNI VERSION answer, so that the same harness
// can ask it for VERSION exactly as it asks the plugins. It links nothing
// but the runtime and os.
const helloSource = "package main\n\nimport \"os\"\n\nfunc main() {\n\tos.Stdout.WriteString(`" +
	`{"cniVersion":"1.1.0","supportedVersions":["1.1.0"]}` + "` + \"\\n\")\n}\n"

// helloBuildFlags are `make build`'s flags (the version stamp aside), so
// that the reference differs from lockstep only in what it links.
var helloBuildFlags = []string{"-trimpath", "-ldflags=-s -w"}

// shellWords renders args as they would be typed in a shell: an argument
// with a space is quoted after its flag's '='.
func shellWords(args []string) string {
	out := make([]string, len(args))
	for i, a := range args {
		if flag, val, ok := strings.Cut(a, "="); ok && strings.Contains(val, " ") {
			a = flag + "='" + val + "'"
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

// hello is the reference binary and what its starts measured.
type hello struct {
	cni                *libcni.CNIConfig // runs it inside the lockstep node
	size               int64             // bytes of the binary
	execFloor, execCPU []time.Duration
}

// buildHello builds the hello-world reference with CGO_ENABLED=0 in a
// directory of the run's own, set up to be exec'd inside node's namespace
// by the same libcni harness as the plugins.
func buildHello(ctx context.Context, workDir string, node *nodesim.Node) (*hello, error) {
	src := filepath.Join(workDir, "hello")
	binDir := filepath.Join(src, "bin")
	if err := os.MkdirAll(binDir, 0o755); err != nil {
		return nil, fmt.Errorf("create hello world directory: %w", err)
	}
	for name, text := range map[string]string{
		"go.mod":  "module cnibench.example/hello\n\ngo 1.22\n",
		"main.go": helloSource,
	} {
		if err := os.WriteFile(filepath.Join(src, name), []byte(text), 0o644); err != nil {
			return nil, fmt.Errorf("write hello world %s: %w", name, err)
		}
	}
	bin := filepath.Join(binDir, helloType)
	args := append(append([]string{"build"}, helloBuildFlags...), "-o", bin, ".")
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build the hello world reference (go %s): %w\n%s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	st, err := os.Stat(bin)
	if err != nil {
		return nil, fmt.Errorf("built hello world: %w", err)
	}
	return &hello{
		cni:  libcni.NewCNIConfigWithCacheDir([]string{binDir}, filepath.Join(src, "cni-cache"), &nodesim.PluginExec{Node: node.NS}),
		size: st.Size(),
	}, nil
}
