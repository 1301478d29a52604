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
// Measured with `GODEBUG=inittrace=1 lockstep-cni` (CNI_COMMAND=VERSION;
// the sum of the trace's bytes and clock columns), and the exec time of
// that VERSION call: the median of 300 runs interleaved with the build
// compared against, and `perf stat -r 100`, on two shared cores with other
// builds running (load 7-15), so only the differences are meaningful:
//
//   - standalone only, before Kubernetes mode: 123 KiB in 131 packages;
//     11 MB binary; exec median 3.7 ms (min 3.2 ms).
//   - with Kubernetes mode on client-go's tools/cache informers and
//     clientcmd: 849 KiB in 195 packages; 26 MB binary; exec median
//     6.6 ms, 6.0 ms of CPU and 798 page faults per exec. The largest
//     initialisers: go-cmp 214 KiB (the reflector imports it through
//     client-go/util/consistencydetector and apimachinery/pkg/util/diff),
//     clientcmd/api/latest 16 KiB.
//   - kube/client's own Informer and kubeconfig loader instead (neither
//     tools/cache nor clientcmd linked): 584 KiB in 185 packages, init
//     clock median 0.5-1.5 ms lower; 21 MB binary; exec median 5.5 ms (a
//     static hello world 1.8 ms, the reference ptp plugin 2.9 ms), 4.4 ms
//     of CPU and 643 page faults per exec.
//
// What remains is what client-go's rest client needs and k8s.io/api:
// k8s.io/api core/v1 120 KiB (gogo-protobuf registration and its
// documentation maps), apimachinery util/validation 56 KiB (regexps,
// through labels and meta/v1), api/meta 53 KiB, meta/v1 37 KiB,
// client-go/plugin/pkg/client/auth/exec 36 KiB (rest's exec credential
// plugins, with go-spew through util/dump), sigs.k8s.io/yaml's goyaml.v2
// 26 KiB and json-iterator 18 KiB (both through structured-merge-diff,
// which apimachinery/pkg/runtime imports). Outside Kubernetes:
// go.yaml.in/yaml/v3 25 KiB (agent/manifests) and encoding/xml 18 KiB
// (cilium/ebpf's internal/testutils/testmain).
//
// What stays out is what would double it: client-go's generated clientset
// and its scheme package, which registers every Kubernetes API group in
// init (+850 KiB, measured for k8s.io/client-go/kubernetes/scheme);
// kube/source and kube/client build schemes of the groups they read on
// first use instead, and heavyInitForPlugin below fails the test when the
// clientset, tools/cache or clientcmd comes back. The Prometheus client
// library once added 0.2 MiB and 1.2 ms, which is why the agent's metrics
// are written by internal/promtext.
const initBudget = 640 << 10

// heavyInitForPlugin are packages (and the packages under them) that must
// not initialise on a lockstep-cni start: each either registers a large
// share of the Kubernetes API in init, for callers that can build what
// they need on first use, or is a client-go tool kube/client replaces.
var heavyInitForPlugin = []string{
	"k8s.io/client-go/kubernetes",          // clientset and its all-groups scheme
	"k8s.io/client-go/informers",           // generated shared informers (need the clientset)
	"k8s.io/client-go/applyconfigurations", // server-side apply builders
	"k8s.io/kube-openapi",                  // OpenAPI models for server-side apply
	"k8s.io/client-go/tools/cache",         // informers: use kube/client.Informer
	"k8s.io/client-go/util/consistencydetector",
	"github.com/google/go-cmp", // 214 KiB; tools/cache's reflector brought it
	// clientcmd's scheme of kubeconfig versions: use kube/client.LoadConfig.
	// (clientcmd/api itself stays: rest imports it.) clientcmd always
	// imports it, so banning it keeps clientcmd out too.
	"k8s.io/client-go/tools/clientcmd/api/latest",
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
			if f[1] == banned || strings.HasPrefix(f[1], banned+"/") {
				t.Errorf("package %s initialises on every lockstep-cni start; see heavyInitForPlugin for what to use instead", f[1])
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
