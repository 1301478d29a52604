//go:build linux

package probe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"lockstep.dev/lockstep/probe/nodesim"
	"lockstep.dev/lockstep/test/testenv"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// builtBinary builds the lockstep binary once per test binary.
func builtBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "lockstep-probe-bin-")
		if err != nil {
			buildErr = err
			return
		}
		buildErr = nodesim.BuildBinary("..", dir)
		binPath = filepath.Join(dir, "lockstep")
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// threePods is three pods in two namespaces with TCP and UDP ports.
func threePods() []Pod {
	return []Pod{
		{Namespace: "x", Name: "a", Ports: []Port{{80, TCP}, {53, UDP}}},
		{Namespace: "x", Name: "b", Ports: []Port{{80, TCP}, {81, TCP}}},
		{Namespace: "y", Name: "a", Ports: []Port{{80, ""}, {53, UDP}}},
	}
}

// leftovers lists what a probe run may leave behind: its namespaces, its
// work directories, processes running from them, and links in the
// machine's own namespace.
type leftovers struct {
	netns, dirs, links []string
	procs              []int
}

// ownPrefix is how this process's probe runs name their namespaces and
// work dirs; other packages' tests may be probing at the same time.
var ownPrefix = fmt.Sprintf("%s-%d-", NSPrefix, os.Getpid())

func snapshot(t *testing.T) leftovers {
	t.Helper()
	var l leftovers
	entries, _ := os.ReadDir(nodesim.RunDir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ownPrefix) {
			l.netns = append(l.netns, e.Name())
		}
	}
	l.dirs, _ = filepath.Glob(filepath.Join(os.TempDir(), ownPrefix+"*"))
	for _, d := range l.dirs {
		l.procs = append(l.procs, nodesim.ProcessesUsing(d)...)
	}
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, link := range links {
		l.links = append(l.links, link.Attrs().Name)
	}
	slices.Sort(l.links)
	return l
}

// checkNothingLeft fails t if anything exists now that did not before.
func checkNothingLeft(t *testing.T, before leftovers) {
	t.Helper()
	after := snapshot(t)
	if len(after.netns) > 0 || len(after.dirs) > 0 || len(after.procs) > 0 {
		t.Errorf("probe left behind namespaces %v, directories %v, processes %v", after.netns, after.dirs, after.procs)
	}
	if !slices.Equal(before.links, after.links) {
		t.Errorf("the machine's links changed: before %v, after %v", before.links, after.links)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if bytes.Contains(mounts, []byte(filepath.Join(os.TempDir(), ownPrefix))) {
		t.Errorf("a probe bpffs mount is left behind:\n%s", mounts)
	}
}

func TestPrivilegedProbeNoPolicyAllowsAll(t *testing.T) {
	testenv.Privileged(t)
	bin := builtBinary(t)
	before := snapshot(t)
	var progress bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rep, err := Run(ctx, Config{Binary: bin, Pods: threePods(), Progress: &progress})
	t.Logf("progress:\n%s", progress.String())
	if err != nil {
		t.Fatal(err)
	}
	checkNothingLeft(t, before)

	// x/a and y/a declare 80/TCP and 53/UDP, x/b 80/TCP and 81/TCP: each
	// pod probes the other two on their two ports each.
	if got, want := len(rep.Results), 3*2*2; got != want {
		t.Errorf("%d results, want %d", got, want)
	}
	want := `80/TCP  x/a  x/b  y/a
x/a     -    .    .
x/b     .    -    .
y/a     .    .    -

81/TCP  x/b
x/a     .
x/b     -
y/a     .

53/UDP  x/a  y/a
x/a     -    .
x/b     .    .
y/a     .    -
`
	got := rep.Table()
	if got.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", got, want)
	}
	for _, r := range rep.Results {
		if r.Allowed == nil {
			t.Errorf("%s -> %s %d/%s: %s", r.From, r.To, r.Port, r.Protocol, r.Error)
		}
	}
	for _, p := range rep.Pods {
		if !strings.HasPrefix(p.IP, "10.244.") {
			t.Errorf("pod %s got %q, want an address from 10.244.0.0/16", p.Key(), p.IP)
		}
	}
}

func TestPrivilegedProbeSCTP(t *testing.T) {
	testenv.Privileged(t)
	// Both kinds of kernel are checked: one with SCTP sockets probes the
	// SCTP port like any other, one without marks it unprobeable.
	l, sctpErr := listenSCTP(0)
	hasSCTP := sctpErr == nil
	if hasSCTP {
		l.Close()
	}
	if !hasSCTP && !errors.Is(sctpErr, ErrNoSCTP) {
		t.Fatalf("listen SCTP: %v, want success or ErrNoSCTP", sctpErr)
	}
	bin := builtBinary(t)
	pods := []Pod{
		{Namespace: "x", Name: "a", Ports: []Port{{80, TCP}}},
		{Namespace: "x", Name: "b", Ports: []Port{{80, TCP}, {9, SCTP}}},
	}
	rep, err := Run(context.Background(), Config{Binary: bin, Pods: pods})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rep.Results {
		switch r.Protocol {
		case SCTP:
			if !hasSCTP && (r.Allowed != nil || !strings.Contains(r.Error, "no SCTP sockets")) {
				t.Errorf("SCTP result %+v, want allowed null and a no-SCTP error", r)
			}
			if hasSCTP && (r.Allowed == nil || !*r.Allowed) {
				t.Errorf("SCTP result %+v on a kernel with SCTP, want allowed", r)
			}
		default:
			if r.Allowed == nil || !*r.Allowed {
				t.Errorf("TCP result %+v, want allowed", r)
			}
		}
	}
	want := 1
	if hasSCTP {
		want = 0
	}
	if got := rep.Table().Count(CellUnprobeable); got != want {
		t.Errorf("%d '?' cells, want %d:\n%s", got, want, rep.Table())
	}
}

// TestPrivilegedProbeCancelLeavesNothing cancels runs at several points —
// while the agent starts, while pods are created, as probing starts — and
// checks each removes everything it made.
func TestPrivilegedProbeCancelLeavesNothing(t *testing.T) {
	testenv.Privileged(t)
	bin := builtBinary(t)
	before := snapshot(t)
	pods := threePods()
	for i := range 6 {
		pods = append(pods, Pod{Namespace: "z", Name: string(rune('a' + i)), Ports: []Port{{80, TCP}, {53, UDP}}})
	}
	for _, at := range []string{"starting the agent", "creating", "probing"} {
		t.Run(at, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			w := &cancelOn{prefix: at, cancel: cancel}
			_, err := Run(ctx, Config{Binary: bin, Pods: pods, Progress: w, Timeout: 2 * time.Second})
			if err == nil {
				t.Fatalf("run cancelled at %q returned no error", at)
			}
			if !w.seen {
				t.Fatalf("progress never said %q: %v", at, err)
			}
			checkNothingLeft(t, before)
		})
	}
}

// cancelOn is a progress writer that cancels the run when a line starting
// with prefix is written.
type cancelOn struct {
	mu     sync.Mutex
	prefix string
	cancel context.CancelFunc
	seen   bool
}

func (c *cancelOn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.seen && strings.HasPrefix(string(p), c.prefix) {
		c.seen = true
		c.cancel()
	}
	return len(p), nil
}

// TestPrivilegedSweepStale leaves a namespace and a work directory as a
// killed run would, and checks SweepStale removes them.
func TestPrivilegedSweepStale(t *testing.T) {
	testenv.Privileged(t)
	deadPID := unusedPID(t)
	name := strings.Replace(nodesim.Name(NSPrefix), "-"+strconv.Itoa(os.Getpid())+"-", "-"+strconv.Itoa(deadPID)+"-", 1)
	n, err := nodesim.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	n.Close()
	dir, err := os.MkdirTemp("", NSPrefix+"-"+strconv.Itoa(deadPID)+"-")
	if err != nil {
		t.Fatal(err)
	}
	if err := nodesim.MountBPF(filepath.Join(dir, "node", "bpf")); err != nil {
		t.Fatal(err)
	}
	removed, err := SweepStale()
	if err != nil {
		t.Fatal(err)
	}
	if removed < 2 {
		t.Errorf("SweepStale removed %d, want at least 2", removed)
	}
	if _, err := os.Stat(nodesim.Path(name)); err == nil {
		t.Errorf("namespace %s is still there", name)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("directory %s is still there", dir)
	}
}

// TestPrivilegedProbeNinePodsSixPorts is the size of the upstream e2e
// matrix: 9 pods in 3 namespaces, 6 ports each, 432 probes. It must take
// seconds, not minutes.
func TestPrivilegedProbeNinePodsSixPorts(t *testing.T) {
	testenv.Privileged(t)
	bin := builtBinary(t)
	ports := []Port{{80, TCP}, {81, TCP}, {8080, TCP}, {80, UDP}, {81, UDP}, {53, UDP}}
	var pods []Pod
	for _, ns := range []string{"x", "y", "z"} {
		for _, name := range []string{"a", "b", "c"} {
			pods = append(pods, Pod{Namespace: ns, Name: name, Ports: ports})
		}
	}
	var progress bytes.Buffer
	start := time.Now()
	rep, err := Run(context.Background(), Config{Binary: bin, Pods: pods, Progress: &progress})
	elapsed := time.Since(start)
	t.Logf("progress:\n%s", progress.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 9*8*6 {
		t.Errorf("%d results, want %d", len(rep.Results), 9*8*6)
	}
	if allowed, _, _ := rep.Counts(); allowed != len(rep.Results) {
		t.Errorf("%d of %d allowed without policies:\n%s", allowed, len(rep.Results), rep.Table())
	}
	if elapsed > 20*time.Second {
		t.Errorf("took %s; a 9-pod, 6-port probe must take seconds", elapsed)
	}
}

// webService is a namespace x with pods a and b behind the Service x/web
// (80/TCP) and a pod c that is no backend, without policies.
const webService = `apiVersion: v1
kind: Namespace
metadata: {name: x}
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: x}
spec:
  clusterIPs: [10.96.0.10, "fd00:10:96::10"]
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Pod
metadata: {name: a, namespace: x, labels: {app: web}}
spec: {containers: [{name: c, ports: [{containerPort: 8080}]}]}
---
apiVersion: v1
kind: Pod
metadata: {name: b, namespace: x, labels: {app: web}}
spec: {containers: [{name: c, ports: [{containerPort: 8080}]}]}
---
apiVersion: v1
kind: Pod
metadata: {name: c, namespace: x}
spec: {containers: [{name: c, ports: [{containerPort: 80}]}]}
`

// TestPrivilegedProbeServiceBackends probes through a Service only: every
// attempt is answered, by the backends' own names (both of them, from
// every pod: one backend alone in 16 attempts is a 2^-15 chance), nothing
// is probed by pod address, and the namespace playing the outside goes
// with the rest.
func TestPrivilegedProbeServiceBackends(t *testing.T) {
	testenv.Privileged(t)
	bin := builtBinary(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "manifests.yaml"), []byte(webService), 0o644); err != nil {
		t.Fatal(err)
	}
	pods, _, err := LoadPods(dir)
	if err != nil {
		t.Fatal(err)
	}
	svcs, _, err := LoadServices(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, dataplane := range []string{"ebpf", "iptables"} {
		t.Run(dataplane, func(t *testing.T) {
			before := snapshot(t)
			var progress bytes.Buffer
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			rep, err := Run(ctx, Config{Binary: bin, Manifests: dir, Pods: pods, Services: svcs, Via: ViaService, Dataplane: dataplane, Progress: &progress})
			if err != nil {
				t.Fatalf("%v\nprogress:\n%s", err, progress.String())
			}
			checkNothingLeft(t, before)
			if len(rep.Results) != 0 {
				t.Errorf("%d results by pod address, want none with via %s", len(rep.Results), ViaService)
			}
			if len(rep.Services) != 1 || rep.Services[0].IP != "10.96.0.10" {
				t.Errorf("services %+v, want x/web at 10.96.0.10", rep.Services)
			}
			if len(rep.ServiceResults) != 3 {
				t.Fatalf("%d results through Services, want 3 (every pod to x/web:80):\n%s", len(rep.ServiceResults), rep.Table())
			}
			for _, r := range rep.ServiceResults {
				if r.Outcome != OutcomeAllowed || r.Attempts != DefaultAttempts || r.Answered != DefaultAttempts {
					t.Errorf("%s -> %s: %s after %d attempts (%d answered), want allowed after %d, all answered (%s)",
						r.From, r.Service, r.Outcome, r.Attempts, r.Answered, DefaultAttempts, r.Error)
				}
				if want := []string{"x/a", "x/b"}; !slices.Equal(r.Backends, want) {
					t.Errorf("%s -> %s answered by %v, want %v", r.From, r.Service, r.Backends, want)
				}
			}
			want := "svc:80/TCP  x/web\nx/a         .\nx/b         .\nx/c         .\n"
			if got := rep.Table().String(); got != want {
				t.Errorf("table:\n%s\nwant:\n%s\nprogress:\n%s", got, want, progress.String())
			}
		})
	}
}

// unusedPID returns a PID no process has: the highest PIDs are rarely in
// use, so it looks down from the largest a 64-bit kernel hands out.
func unusedPID(t *testing.T) int {
	t.Helper()
	for pid := 4194303; pid > 4194303-1000; pid-- {
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			return pid
		}
	}
	t.Fatal("no unused PID among the 1000 highest")
	return 0
}
