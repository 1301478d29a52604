//go:build linux

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
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

// The budgets of lockstep-cni's start. Go runs every linked package's
// initialiser, whatever the subcommand, so these bound what the agent's
// and the operator's dependencies cost each pod ADD. TestPluginStartupInitCost
// reads them from `GODEBUG=inittrace=1 lockstep-cni` (CNI_COMMAND=VERSION).
//
// History, each measured on two shared cores with other builds running, so
// only differences within one run mean much (exec times are medians of
// interleaved runs or `perf stat -r 50`):
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
//   - issue 17 (a small start), before: 591 KiB in 187 packages, 22 MB
//     binary; 4.6 ms of CPU and 705 page faults per VERSION against 0.8 ms
//     and 204 for a static hello world built with the same flags (1.4 MB).
//     The iptables dataplane's regexp for kubelet's hint chains, compiled
//     in init, became plain code: 584 KiB. What lockstep's own packages
//     still allocate in init is bounded by ownInitBudget. Interleaved
//     under load: lockstep 2.4-3.0 ms of CPU and 660 page faults per
//     VERSION, the hello world 0.7-0.8 ms and 190-220, and a build of
//     cni/plugin alone (no agent, no Kubernetes) 1.0-1.1 ms and 300: the
//     difference is what the one binary links for the agent and operator.
//   - issue 17, own REST client (kube/client.REST instead of client-go's
//     rest, its transport, exec-credential plugins and metrics; client-go is
//     no longer linked): 526 KiB in 178 packages, 18.7 MB binary, against
//     595 KiB, 192 and 23.0 MB just before with the same toolchain (the
//     entry above was measured with an older one). On a machine where a
//     page fault costs about 35 µs of CPU, perf stat -r 40 of VERSION,
//     three rounds interleaved: 585-613 page faults and 24.3-25.3 ms of CPU
//     per exec against 661-684 and 24.9-29.4 ms before (the CPU did not
//     move measurably); a static hello world 184-199 and 5.5-6.3 ms; an
//     experiment build of lockstep's 34 packages that need no Kubernetes
//     package (blank imports, the plugin's main) 325-363 and 13.1-16.2 ms.
//     Only lockstep's own API types in place of k8s.io/api and
//     apimachinery would take that half; the rest is what the agent links
//     outside Kubernetes.
//   - issue 17, lockstep's own API types (kube/api: the kinds and fields
//     lockstep reads, their metadata, options, status errors and watch
//     events, with no registration in init; nothing of k8s.io or
//     sigs.k8s.io is linked): 144 KiB in 142 packages, 15.2 MB binary,
//     against 538 KiB, 178 and 18.8 MB before with the same toolchain.
//     perf stat -r 30 of VERSION: 403 page faults and 18.3 ms of CPU per
//     exec, against about 600 before and 185 and 6.4 ms for the hello
//     world.
//
// What remains outside lockstep: go.yaml.in/yaml/v3 25 KiB (agent/manifests
// and internal/yamljson, for YAML 1.2's core schema), encoding/xml 18 KiB
// (cilium/ebpf's internal/testutils/testmain, which its internal/sys
// imports), unicode's tables and cilium/ebpf/features 11 KiB each. Kubernetes'
// API libraries stay out (heavyInitForPlugin): k8s.io/api registers its
// types with gogo-protobuf in init (core/v1 alone 120 KiB), apimachinery
// compiles validation regexps and builds codecs, and their dependencies
// (structured-merge-diff, json-iterator, cbor, goyaml.v2) add their own;
// together about 400 KiB, 36 packages and 3.6 MB of binary. The Prometheus
// client library once added 0.2 MiB and 1.2 ms, which is why the agent's
// metrics are written by internal/promtext.
const (
	// initBudget bounds the heap all package initialisers together
	// allocate before lockstep-cni runs (144 KiB measured).
	initBudget = 160 << 10
	// initPackagesBudget bounds how many packages have an initialiser
	// (142 measured): a new dependency tree shows here before its bytes do.
	initPackagesBudget = 146
	// ownInitBudget bounds what lockstep's own packages allocate in init
	// together (1.8 KiB measured, small maps and replacers). A table or
	// regexp of ours belongs behind sync.OnceValue, or in plain code, not
	// in a package variable every pod ADD builds.
	ownInitBudget = 2 << 10
)

// ownModule is lockstep's module path, whose packages ownInitBudget bounds.
const ownModule = "lockstep.dev/lockstep/"

// heavyInitForPlugin are packages (and the packages under them) that must
// not initialise on a lockstep-cni start: each registers types, codecs or
// regexps in init for callers that need them on first use at most.
var heavyInitForPlugin = []string{
	// Kubernetes' client and API libraries: use kube/client (REST, Config,
	// Informer) and kube/api (the API types, errors and watch events).
	"k8s.io",
	"sigs.k8s.io",
	"github.com/gogo/protobuf",
	"github.com/google/go-cmp", // 214 KiB; client-go's reflector brought it
}

// initRecord is one line of the runtime's init trace: the package whose
// initialisers ran and the heap they allocated.
type initRecord struct {
	pkg   string
	bytes int64
}

// parseInitTrace reads the `GODEBUG=inittrace=1` lines of a process's
// stderr ("init PKG @T ms, C ms clock, B bytes, A allocs") and ignores
// everything else.
func parseInitTrace(stderr []byte) ([]initRecord, error) {
	var recs []initRecord
	sc := bufio.NewScanner(bytes.NewReader(stderr))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 10 || f[0] != "init" || f[8] != "bytes," {
			continue
		}
		n, err := strconv.ParseInt(f[7], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("parse init trace line %q: %w", sc.Text(), err)
		}
		recs = append(recs, initRecord{pkg: f[1], bytes: n})
	}
	return recs, sc.Err()
}

// initBudgetViolations checks an init trace against heavyInitForPlugin and
// the budgets above, and says what broke each.
func initBudgetViolations(recs []initRecord) []string {
	var problems []string
	var total, own int64
	var owners []string
	for _, r := range recs {
		for _, banned := range heavyInitForPlugin {
			if r.pkg == banned || strings.HasPrefix(r.pkg, banned+"/") {
				problems = append(problems, fmt.Sprintf("package %s initialises on every lockstep-cni start; see heavyInitForPlugin for what to use instead", r.pkg))
			}
		}
		total += r.bytes
		if strings.HasPrefix(r.pkg, ownModule) && r.bytes > 0 {
			own += r.bytes
			owners = append(owners, fmt.Sprintf("%s %d", strings.TrimPrefix(r.pkg, ownModule), r.bytes))
		}
	}
	if total > initBudget {
		problems = append(problems, fmt.Sprintf("package init allocates %d bytes, budget %d: something heavy joined the binary (compare `GODEBUG=inittrace=1 CNI_COMMAND=VERSION bin/lockstep-cni` before and after)", total, initBudget))
	}
	if len(recs) > initPackagesBudget {
		problems = append(problems, fmt.Sprintf("%d packages run an initialiser, budget %d: a new dependency joined the binary; keep it out or raise the budget with its measured cost", len(recs), initPackagesBudget))
	}
	if own > ownInitBudget {
		problems = append(problems, fmt.Sprintf("lockstep's own packages allocate %d bytes in init, budget %d (%s): build tables and regexps on first use (sync.OnceValue) or write them as code", own, ownInitBudget, strings.Join(owners, ", ")))
	}
	return problems
}

// TestInitBudgetViolations shows the budgets catch what they are for, on
// traces made up from real lines.
func TestInitBudgetViolations(t *testing.T) {
	line := func(pkg string, n int64) string {
		return fmt.Sprintf("init %s @1.0 ms, 0.01 ms clock, %d bytes, 3 allocs\n", pkg, n)
	}
	base := line("runtime", 0) + line("go.yaml.in/yaml/v3", 25736) + line(ownModule+"agent/iptables", 576) + "unrelated output\n"
	many := ""
	for i := range initPackagesBudget {
		many += line(fmt.Sprintf("example.com/p%d", i), 0)
	}
	tests := []struct {
		name  string
		trace string
		want  string // a problem containing this; "" for none
	}{
		{name: "within every budget", trace: base},
		{name: "a regexp of ours compiled in init", trace: base + line(ownModule+"agent/iptables", 8688), want: "lockstep's own packages allocate 9264 bytes"},
		{name: "a heavy dependency", trace: base + line("example.com/heavy", initBudget), want: "something heavy joined"},
		{name: "a banned package", trace: base + line("k8s.io/client-go/kubernetes/scheme", 0), want: "k8s.io/client-go/kubernetes/scheme initialises"},
		{name: "many new packages", trace: base + many, want: "packages run an initialiser"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, err := parseInitTrace([]byte(tt.trace))
			if err != nil {
				t.Fatal(err)
			}
			got := initBudgetViolations(recs)
			switch {
			case tt.want == "" && len(got) > 0:
				t.Errorf("problems %q, want none", got)
			case tt.want != "" && !slices.ContainsFunc(got, func(p string) bool { return strings.Contains(p, tt.want) }):
				t.Errorf("problems %q, want one containing %q", got, tt.want)
			}
		})
	}
}

// TestPluginStartupInitCost runs the built binary as lockstep-cni and reads
// the runtime's init trace: none of heavyInitForPlugin may initialise, and
// the init work must stay within the budgets above.
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
	recs, err := parseInitTrace(stderr.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) == 0 {
		t.Fatal("no init trace read; did GODEBUG=inittrace=1 stop working?")
	}
	var total int64
	for _, r := range recs {
		total += r.bytes
	}
	t.Logf("%d packages initialise, allocating %d bytes, before the plugin runs", len(recs), total)
	for _, p := range initBudgetViolations(recs) {
		t.Error(p)
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
