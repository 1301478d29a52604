//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"lockstep.dev/lockstep/test/benchcluster"
	"lockstep.dev/lockstep/test/benchkit"

	"lockstep.dev/lockstep/probe/nodesim"
)

// settle is how long the agent is left alone after it answers, so memory
// that start-up made garbage is collected before RSS is read.
const settle = 3 * time.Second

// rssResult is the agent's memory with the cluster loaded.
type rssResult struct {
	rssKB, hwmKB int
}

// newNode creates a nodesim node (namespace, private bpffs, agent work
// directory) that is removed at the end of the run, and starts its agent.
func (b *bench) newNode(ctx context.Context, name, manifests string) (*nodesim.Node, error) {
	node, err := nodesim.NewNode(nodesim.NodeOptions{
		Prefix: nsPrefix, BinDir: b.binDir, WorkDir: filepath.Join(b.work, name),
		Pools: []string{"10.244.0.0/24"}, Manifests: manifests,
	})
	if err != nil {
		return nil, err
	}
	b.onCleanup(node.Close)
	if err := node.StartAgent(ctx); err != nil {
		return nil, err
	}
	return node, nil
}

// benchRSS starts an agent whose --manifests hold the cluster and reads
// its VmRSS once it serves: the agent loads the manifests and applies them
// before it opens its socket.
func (b *bench) benchRSS(ctx context.Context, c *benchcluster.Cluster) (*rssResult, error) {
	dir := filepath.Join(b.work, "rss-manifests")
	if err := benchcluster.WriteManifests(dir, c); err != nil {
		return nil, err
	}
	start := time.Now()
	node, err := b.newNode(ctx, "rss-node", dir)
	if err != nil {
		return nil, err
	}
	logf("  agent serving %s after start", benchkit.FmtDur(time.Since(start)))
	pid, err := processBySocket(node.Socket)
	if err != nil {
		return nil, err
	}
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(settle):
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, fmt.Errorf("read agent status: %w", err)
	}
	res := &rssResult{rssKB: statusKB(st, "VmRSS"), hwmKB: statusKB(st, "VmHWM")}
	if res.rssKB == 0 {
		return nil, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
	}
	logf("  VmRSS %d MiB (peak %d MiB)", res.rssKB/1024, res.hwmKB/1024)
	return res, node.StopAgent()
}

// processBySocket finds the agent nodesim started: the process whose
// command line names socket, a path unique to this run.
func processBySocket(socket string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := bytes.Split(cmdline, []byte{0})
		if len(args) > 1 && string(args[1]) == "agent" && bytes.Contains(cmdline, []byte("\x00"+socket+"\x00")) {
			return pid, nil
		}
	}
	return 0, fmt.Errorf("find the agent serving %s in /proc", socket)
}

// statusKB returns the value in kB of field in a /proc/PID/status file.
func statusKB(status []byte, field string) int {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		val, ok := strings.CutPrefix(sc.Text(), field+":")
		if !ok {
			continue
		}
		f := strings.Fields(val)
		if len(f) == 2 && f[1] == "kB" {
			n, _ := strconv.Atoi(f[0])
			return n
		}
	}
	return 0
}
