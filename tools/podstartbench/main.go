//go:build linux

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"lockstep.dev/lockstep/test/benchkit"
	"lockstep.dev/lockstep/test/kubetest"
	"lockstep.dev/lockstep/test/realnode"
)

// config is what the command line asks for.
type config struct {
	out    string
	binDir string
	pods   int
	rounds int
	args   []string
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("podstartbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: sudo go run ./tools/podstartbench [flags]   (or: make bench)")
		fmt.Fprintln(stderr, "Times N pods applied at once to one real node until all are Ready, lockstep against bridge + host-local.")
		fs.PrintDefaults()
	}
	fs.StringVar(&c.out, "out", "", "markdown file whose podstartbench section is (re)written; empty prints it to stdout")
	fs.StringVar(&c.binDir, "bin", "bin", "directory holding the lockstep binary whose version is recorded")
	fs.IntVar(&c.pods, "pods", 60, "pods per round")
	fs.IntVar(&c.rounds, "rounds", 3, "rounds per CNI, interleaved")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q: podstartbench takes only flags", fs.Args())
	}
	if c.pods < 1 || c.rounds < 1 {
		return c, errors.New("-pods and -rounds must be at least 1")
	}
	c.args = args
	return c, nil
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s podstartbench: %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// run is the whole command; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if status, ok := benchkit.Preflight("podstartbench", "it brings up a cluster in network namespaces", err, stderr); !ok {
		return status
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	// The machine and tree are read when the run starts: by its end the
	// tree may have moved on.
	machine := benchkit.GatherMachine("tools/podstartbench", cfg.args, cfg.binDir, benchkit.LoadAverage())
	rounds, err := measure(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "podstartbench:", err)
		return 1
	}
	rep := report{machine: machine, pods: cfg.pods, rounds: rounds}
	if err := fileSection.Write(cfg.out, rep.section(), stdout); err != nil {
		fmt.Fprintln(stderr, "podstartbench:", err)
		return 1
	}
	return 0
}

// The two CNIs of a round.
const (
	cniLockstep = "lockstep"
	cniBridge   = "bridge + host-local"
)

// round is one timed start of the pods with one CNI.
type round struct {
	cni   string
	ready time.Duration // apply started → last pod Ready
	first time.Duration // apply started → first pod Ready
}

// benchNode is the node the pods start on.
const benchNode = "e2e-node-1"

// measure brings up the cluster, runs the rounds and takes it down.
func measure(ctx context.Context, cfg config) ([]round, error) {
	repo, err := realnode.RepoRoot()
	if err != nil {
		return nil, err
	}
	kubeBin, err := kubetest.BinDir(ctx, logf)
	if err != nil {
		return nil, err
	}
	initBin := filepath.Join(repo, "bin", "e2e")
	build := exec.CommandContext(ctx, "go", "build", "-o", initBin, "./tools/e2e")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build tools/e2e: %w\n%s", err, out)
	}
	images, err := realnode.BuildImages(ctx, realnode.ImageOptions{Repo: repo, KubeBinDir: kubeBin, Logf: logf})
	if err != nil {
		return nil, err
	}
	c, err := realnode.Up(ctx, realnode.Options{Name: realnode.NameFromEnv(), KubeBinDir: kubeBin, InitBinary: initBin, Images: images, Logf: logf})
	if err != nil {
		return nil, err
	}
	defer func() {
		if err := realnode.Down(c.Name, c.Dir, logf); err != nil {
			logf("take the cluster down: %v", err)
		}
	}()
	if err := c.InstallLockstep(ctx, repo, "ebpf"); err != nil {
		return nil, err
	}
	node, err := c.Node(benchNode)
	if err != nil {
		return nil, err
	}
	// One unmeasured round each first: the first pods of a node pay for
	// warming containerd's and the kernel's caches.
	var out []round
	for i := -1; i < cfg.rounds; i++ {
		order := []string{cniLockstep, cniBridge}
		if i%2 != 0 {
			slices.Reverse(order)
		}
		for _, cni := range order {
			r, err := startPods(ctx, c, node, cni, cfg.pods, fmt.Sprintf("podstart-%d", i+1))
			if err != nil {
				return nil, fmt.Errorf("%s round %d: %w", cni, i+1, err)
			}
			if i < 0 {
				logf("warm-up %-20s %d pods Ready in %s", cni, cfg.pods, r.ready.Round(time.Millisecond))
				continue
			}
			logf("round %d %-20s %d pods Ready in %s (first after %s)", i+1, cni, cfg.pods, r.ready.Round(time.Millisecond), r.first.Round(time.Millisecond))
			out = append(out, r)
		}
	}
	return out, nil
}

// bridgeConf gives the node to the reference plugins while it exists: it
// sorts before lockstep's 10-lockstep.conflist.
const (
	bridgeConfPath = "/etc/cni/net.d/05-bridge.conflist"
	bridgeConf     = `{"cniVersion":"1.0.0","name":"bench-bridge","plugins":[{"type":"bridge","bridge":"cni0","isGateway":true,"ipMasq":true,` +
		`"ipam":{"type":"host-local","ranges":[[{"subnet":"10.250.0.0/16"}]],"routes":[{"dst":"0.0.0.0/0"}]}}]}`
)

// startPods applies n pods to node at once, in a new namespace, and
// returns how long until they were all Ready; then deletes them (not
// timed).
func startPods(ctx context.Context, c *realnode.Cluster, node realnode.Host, cni string, n int, ns string) (round, error) {
	r := round{cni: cni}
	if cni == cniBridge {
		if _, err := c.Exec(ctx, node, "sh", "-c", fmt.Sprintf("printf '%%s' '%s' > %s", bridgeConf, bridgeConfPath)); err != nil {
			return r, err
		}
		defer func() {
			if _, err := c.Exec(context.Background(), node, "rm", "-f", bridgeConfPath); err != nil {
				logf("remove the bridge config: %v", err)
			}
		}()
		// containerd reloads its CNI config on the file's creation.
		time.Sleep(2 * time.Second)
	}
	ns = fmt.Sprintf("%s-%s", ns, strings.Fields(cni)[0])
	if _, err := c.Kubectl(ctx, "create", "namespace", ns); err != nil {
		return r, err
	}
	defer func() {
		if _, err := c.Kubectl(context.Background(), "delete", "namespace", ns, "--wait=true", "--timeout=5m"); err != nil {
			logf("delete namespace %s: %v", ns, err)
		}
	}()
	watch, err := watchReady(ctx, c, ns)
	if err != nil {
		return r, err
	}
	defer watch.stop()
	var manifests []string
	for i := range n {
		manifests = append(manifests, podManifest(ns, fmt.Sprintf("p%03d", i), node.Name))
	}
	start := time.Now()
	if _, err := c.KubectlIn(ctx, strings.Join(manifests, "\n---\n"), "apply", "-f", "-"); err != nil {
		return r, err
	}
	ready, err := watch.wait(n, 5*time.Minute)
	if err != nil {
		return r, err
	}
	r.first = ready[0].Sub(start)
	r.ready = ready[len(ready)-1].Sub(start)
	if err := checkCNI(ctx, c, ns, cni); err != nil {
		return r, err
	}
	return r, nil
}

// podManifest is a pod running the pause image, on node by the
// scheduler's choice (a node selector), with no probe: Ready once started.
func podManifest(ns, name, node string) string {
	b, _ := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"nodeSelector":                  map[string]string{"kubernetes.io/hostname": node},
			"terminationGracePeriodSeconds": 0,
			"containers": []any{map[string]any{
				"name": "pause", "image": realnode.PauseImage, "imagePullPolicy": "IfNotPresent",
			}},
		},
	})
	return string(b)
}

// checkCNI checks that the round's pods got their addresses from the CNI
// it measured.
func checkCNI(ctx context.Context, c *realnode.Cluster, ns, cni string) error {
	out, err := c.Kubectl(ctx, "get", "pods", "-n", ns, "-o", "jsonpath={.items[*].status.podIP}")
	if err != nil {
		return err
	}
	want := "10.244."
	if cni == cniBridge {
		want = "10.250."
	}
	for _, ip := range strings.Fields(string(out)) {
		if !strings.HasPrefix(ip, want) {
			return fmt.Errorf("a pod of the %s round got %s: not that CNI's address", cni, ip)
		}
	}
	return nil
}
