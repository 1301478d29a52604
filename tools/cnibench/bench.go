//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"lockstep.dev/lockstep/test/benchkit"

	"github.com/containernetworking/plugins/pkg/ns"

	"lockstep.dev/lockstep/probe/nodesim"
)

// lockstepPool is the agent's pool: a /16, so any sensible -burst fits.
const lockstepPool = "10.244.0.0/16"

// ptpConfList is the reference network: ptp with host-local IPAM, at the
// newest CNI version the Debian plugins speak. %q is host-local's data dir.
const ptpConfList = `{"cniVersion":"1.0.0","name":"ptpnet","plugins":[{"type":"ptp","ipMasq":false,"ipam":{"type":"host-local","ranges":[[{"subnet":"10.245.0.0/16"}]],"dataDir":%q}}]}`

// The sides' keys (part of container IDs) and the reference's display name.
const (
	lockstepKey   = "ls"
	referenceKey  = "ptp"
	referenceName = "ptp + host-local"
)

// bench owns everything one run creates, so that cleanup can remove it
// whatever point the run reached.
type bench struct {
	cfg     config
	workDir string
	sides   []*side
	hello   *hello
	pods    []ns.NetNS
}

// run sets up both nodes, takes the measurements and returns the report.
// The report is also returned, with an error, when the measurements finished
// but a burst failed its checks: that outcome is worth writing down.
func (b *bench) run(ctx context.Context) (*report, error) {
	load := benchkit.LoadAverage()
	if n, err := nodesim.SweepStaleRuns(nsPrefix, b.cfg.workDir); err != nil {
		return nil, err
	} else if n > 0 {
		logf("removed what %d earlier, killed runs left behind", n)
	}
	if n, err := nodesim.SweepStale(nsPrefix); err != nil {
		return nil, fmt.Errorf("sweep stale namespaces: %w", err)
	} else if n > 0 {
		logf("removed %d namespaces left by earlier runs", n)
	}
	if err := checkRefPlugins(b.cfg.refPlugins); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(b.cfg.workDir, nodesim.RunDirPattern(nsPrefix))
	if err != nil {
		return nil, fmt.Errorf("create work directory: %w (pass -work with a writable directory on disk)", err)
	}
	b.workDir = dir
	if fsType := filesystemType(dir); fsType == "tmpfs" || fsType == "ramfs" {
		logf("warning: the work directory is on %s, so fsync costs nothing; pass -work with a directory on disk for realistic numbers", fsType)
	}

	binDir, err := b.lockstepBinary(ctx)
	if err != nil {
		return nil, err
	}
	// The machine and tree are read now, not when the run ends: the tree
	// may have moved on by then.
	facts := gatherFacts(b.cfg, binDir, dir, load)
	if err := b.startNodes(ctx, binDir); err != nil {
		return nil, err
	}
	logf("building the %s reference (go build %s)", helloName, shellWords(helloBuildFlags))
	if b.hello, err = buildHello(ctx, dir, findSide(b.sides, lockstepKey).node); err != nil {
		return nil, err
	}
	if err := b.createPods(ctx); err != nil {
		return nil, err
	}
	if err := b.measureExecFloor(ctx); err != nil {
		return nil, err
	}
	if err := b.measureLatency(ctx); err != nil {
		return nil, err
	}
	var burstErrs []error
	for _, s := range b.sides {
		if err := s.runBurst(ctx); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			burstErrs = append(burstErrs, err)
		}
	}
	rep := &report{cfg: b.cfg, facts: facts, sides: b.sides, hello: b.hello}
	rep.sizes = binSizes{
		lockstep:  fileSize(filepath.Join(binDir, "lockstep")),
		reference: fileSize(filepath.Join(b.cfg.refPlugins, "ptp")),
		hello:     b.hello.size,
	}
	return rep, errors.Join(burstErrs...)
}

// fileSize returns the size of the file at path, or 0 when it cannot be
// read (the report then shows no size).
func fileSize(path string) int64 {
	st, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// checkRefPlugins makes sure the reference plugins are where -ref-plugins
// says, with a hint on how to get them.
func checkRefPlugins(dir string) error {
	for _, p := range []string{"ptp", "host-local"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			return fmt.Errorf("find reference plugin %s in %s: %w; install containernetworking-plugins (apt-get install -y containernetworking-plugins) or point -ref-plugins at a directory holding ptp and host-local", p, dir, err)
		}
	}
	return nil
}

// lockstepBinary returns the directory holding lockstep and lockstep-cni:
// -bin when given, else a fresh build in the work directory.
func (b *bench) lockstepBinary(ctx context.Context) (string, error) {
	if b.cfg.binDir != "" {
		for _, name := range []string{"lockstep", "lockstep-cni"} {
			if _, err := os.Stat(filepath.Join(b.cfg.binDir, name)); err != nil {
				return "", fmt.Errorf("-bin %s: %w; run `make build` first, or drop -bin to build a fresh binary", b.cfg.binDir, err)
			}
		}
		return filepath.Abs(b.cfg.binDir)
	}
	root, err := benchkit.FindRepoRoot()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(b.workDir, "bin")
	logf("building lockstep (go build ./cmd/lockstep)")
	if err := nodesim.BuildBinary(root, dir); err != nil {
		return "", err
	}
	return dir, ctx.Err()
}

// startNodes creates the lockstep node with its agent running and the ptp
// node, which needs no agent.
func (b *bench) startNodes(ctx context.Context, binDir string) error {
	logf("starting the lockstep node (agent, pool %s)", lockstepPool)
	ls, err := nodesim.NewNode(nodesim.NodeOptions{
		Prefix:  nsPrefix,
		BinDir:  binDir,
		Pools:   []string{lockstepPool},
		WorkDir: filepath.Join(b.workDir, "lockstep"),
	})
	if err != nil {
		return fmt.Errorf("create lockstep node: %w", err)
	}
	b.sides = append(b.sides, &side{name: "lockstep", key: lockstepKey, pluginType: "lockstep-cni", node: ls, hasAgent: true})
	if err := ls.StartAgent(ctx); err != nil {
		return err
	}

	logf("starting the ptp + host-local node")
	ptpWork := filepath.Join(b.workDir, "ptp")
	ptp, err := nodesim.NewNode(nodesim.NodeOptions{
		Prefix:   nsPrefix,
		BinDir:   b.cfg.refPlugins,
		WorkDir:  ptpWork,
		ConfList: fmt.Appendf(nil, ptpConfList, filepath.Join(ptpWork, "host-local")),
	})
	if err != nil {
		return fmt.Errorf("create ptp node: %w", err)
	}
	b.sides = append(b.sides, &side{name: referenceName, key: referenceKey, pluginType: "ptp", node: ptp})
	return nil
}

// createPods creates every pod namespace of the run up front, so that no
// namespace is created (or torn down by the kernel in the background) while
// a clock runs.
func (b *bench) createPods(ctx context.Context) error {
	perSide := b.cfg.warmup + b.cfg.n + b.cfg.burst
	total := perSide * len(b.sides)
	logf("creating %d pod namespaces", total)
	prog := benchkit.NewProgress("pod namespaces", total, logf)
	for _, s := range b.sides {
		pods := make([]ns.NetNS, 0, perSide)
		for range perSide {
			if err := ctx.Err(); err != nil {
				return err
			}
			pod, err := nodesim.Create(nodesim.Name(nsPrefix))
			if err != nil {
				return fmt.Errorf("create pod namespace: %w", err)
			}
			b.pods = append(b.pods, pod)
			pods = append(pods, pod)
			prog.Step()
		}
		s.latencyPods = pods[:b.cfg.warmup+b.cfg.n]
		s.burstPods = pods[b.cfg.warmup+b.cfg.n:]
	}
	return nil
}

// cleanup removes every pod namespace, stops the agent, removes the node
// namespaces and the work directory, then checks that no namespace of this
// process is left.
func (b *bench) cleanup() error {
	if len(b.pods) > 0 || len(b.sides) > 0 {
		logf("cleaning up %d pod namespaces, %d nodes", len(b.pods), len(b.sides))
	}
	var errs []error
	for _, pod := range b.pods {
		if err := nodesim.Delete(pod); err != nil {
			errs = append(errs, err)
		}
	}
	b.pods = nil
	for _, s := range b.sides {
		if err := s.node.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close %s node: %w", s.name, err))
		}
	}
	b.sides = nil
	if b.workDir != "" {
		if err := os.RemoveAll(b.workDir); err != nil {
			errs = append(errs, fmt.Errorf("remove work directory: %w", err))
		}
		b.workDir = ""
	}
	if left := ownNamespaces(); len(left) > 0 {
		errs = append(errs, fmt.Errorf("namespaces still present: %s; remove them with `ip netns delete NAME`", strings.Join(left, ", ")))
	}
	return errors.Join(errs...)
}

// ownNamespaces lists the named namespaces this process created that still
// exist.
func ownNamespaces() []string {
	entries, err := os.ReadDir(nodesim.RunDir)
	if err != nil {
		return nil
	}
	mine := fmt.Sprintf("%s-%d-", nsPrefix, os.Getpid())
	var left []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), mine) {
			left = append(left, e.Name())
		}
	}
	return left
}
