//go:build linux

package main

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// heavyForPlugin are module path prefixes the CNI plugin must not import:
// it starts on every pod ADD, and these bring large init work, large
// binaries' worth of page faults, or agent-only state.
var heavyForPlugin = []string{
	"k8s.io/",
	"sigs.k8s.io/",
	"github.com/spf13/",
	"github.com/prometheus/",
	"google.golang.org/protobuf",
	"github.com/hashicorp/",
	"go.etcd.io/",
	"github.com/cilium/ebpf",
	"lockstep.dev/lockstep/agent/endpoints",
	"lockstep.dev/lockstep/agent/persist",
	"lockstep.dev/lockstep/agent/server",
	"lockstep.dev/lockstep/agent/store",
}

// TestPluginDeps keeps heavy packages out of the CNI plugin's imports.
func TestPluginDeps(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "lockstep.dev/lockstep/cni/plugin").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		for _, heavy := range heavyForPlugin {
			if strings.HasPrefix(pkg, heavy) {
				t.Errorf("cni/plugin depends on %s; keep it out of the pod ADD path", pkg)
			}
		}
	}
}

// initBudget bounds the heap the whole binary's package initialisers may
// allocate before lockstep-cni runs. Go runs every linked package's init,
// whatever the subcommand, so this is what the agent's dependencies cost
// each pod ADD. Today it is about 0.1 MiB; the Prometheus client library
// alone used to add 0.2 MiB and 1.2 ms, which is why the agent's metrics
// are written by internal/promtext.
const initBudget = 256 << 10

// TestPluginStartupInitCost runs the built binary as lockstep-cni and reads
// the runtime's init trace: no Kubernetes client package may initialise,
// and the total init allocation must stay within initBudget.
func TestPluginStartupInitCost(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := builtBinary(t)
	cmd := exec.Command(filepath.Join(dir, "lockstep-cni"))
	cmd.Env = append(os.Environ(), "CNI_COMMAND=VERSION", "GODEBUG=inittrace=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("lockstep-cni VERSION: %v\n%s", err, stderr.String())
	}
	var total int64
	sc := bufio.NewScanner(&stderr)
	for sc.Scan() {
		// init PKG @T ms, C ms clock, B bytes, A allocs
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[0] != "init" {
			continue
		}
		for _, banned := range []string{"k8s.io/", "sigs.k8s.io/"} {
			if strings.HasPrefix(f[1], banned) {
				t.Errorf("package %s initialises on every lockstep-cni start", f[1])
			}
		}
		bytes, err := strconv.ParseInt(f[7], 10, 64)
		if err != nil {
			t.Fatalf("parse init trace line %q: %v", sc.Text(), err)
		}
		total += bytes
	}
	if total == 0 {
		t.Fatal("no init trace read; did GODEBUG=inittrace=1 stop working?")
	}
	t.Logf("package init allocates %d bytes before the plugin runs", total)
	if total > initBudget {
		t.Errorf("package init allocates %d bytes, budget %d: something heavy joined the binary", total, initBudget)
	}

	// Nothing may print or probe the system from an initialiser: a metrics
	// library once logged a cgroup lookup on every plugin start.
	quiet := exec.Command(filepath.Join(dir, "lockstep-cni"))
	quiet.Env = append(os.Environ(), "CNI_COMMAND=VERSION")
	var quietErr bytes.Buffer
	quiet.Stderr = &quietErr
	if err := quiet.Run(); err != nil || quietErr.Len() > 0 {
		t.Errorf("lockstep-cni VERSION: %v, stderr %q; want silence", err, quietErr.String())
	}
}
