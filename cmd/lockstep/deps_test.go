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
// each pod ADD.
//
// Measured with `GODEBUG=inittrace=1 lockstep-cni` (CNI_COMMAND=VERSION),
// and the exec time of that VERSION call with hyperfine (500 runs, two
// cores, other work running):
//
//   - standalone only, before Kubernetes mode: 123 KiB in 131 packages;
//     11 MB binary; exec median 3.7 ms (min 3.2 ms).
//   - with Kubernetes mode (kube/source, kube/nodeipam, kube/operator:
//     client-go rest and tools/cache, k8s.io/api core/v1 and
//     networking/v1, clientcmd): 849 KiB in 198 packages; 26 MB binary;
//     exec median 6.7 ms (min 5.3 ms), so every pod ADD pays about 3 ms
//     more. The largest initialisers: go-cmp 214 KiB (tools/cache's
//     reflector imports it through client-go/util/consistencydetector and
//     apimachinery/pkg/util/diff), apimachinery 191 KiB (meta/v1,
//     util/validation, api/meta), k8s.io/api 161 KiB (core/v1 registers
//     its gogo-protobuf types).
//
// The old 256 KiB cannot hold: k8s.io/client-go/rest alone allocates
// 367 KiB in init, apimachinery's meta/v1 alone 248 KiB, and the NodeIPAM
// client (kube/client) needs both. What stays out is what would double it:
// client-go's generated clientset and its scheme package, which registers
// every Kubernetes API group in init (+850 KiB, measured for
// k8s.io/client-go/kubernetes/scheme); kube/source and kube/client build
// schemes of the groups they read on first use instead, and
// heavyInitForPlugin below fails the test when the clientset comes back.
// The Prometheus client library once added 0.2 MiB and 1.2 ms, which is
// why the agent's metrics are written by internal/promtext.
const initBudget = 1 << 20

// heavyInitForPlugin are packages that must not initialise on a
// lockstep-cni start: each registers a large share of the Kubernetes API
// in init, for callers that can build what they need on first use.
var heavyInitForPlugin = []string{
	"k8s.io/client-go/kubernetes",          // clientset and its all-groups scheme
	"k8s.io/client-go/informers",           // generated shared informers (need the clientset)
	"k8s.io/client-go/applyconfigurations", // server-side apply builders
	"k8s.io/kube-openapi",                  // OpenAPI models for server-side apply
}

// TestPluginStartupInitCost runs the built binary as lockstep-cni and reads
// the runtime's init trace: none of heavyInitForPlugin may initialise, and
// the total init allocation must stay within initBudget.
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
		for _, banned := range heavyInitForPlugin {
			if strings.HasPrefix(f[1], banned) {
				t.Errorf("package %s initialises on every lockstep-cni start; build the scheme you need on first use (see kube/source/client.go)", f[1])
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
