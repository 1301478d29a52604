//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"

	"lockstep.dev/lockstep/probe/nodesim"
	"lockstep.dev/lockstep/test/testenv"
)

// nsPrefix names every namespace these tests create.
const nsPrefix = "lstest"

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// builtBinary builds bin/lockstep and the lockstep-cni symlink once per test
// binary, the way `make build` does, and returns the directory.
func builtBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "lockstep-bin-")
		if buildErr == nil {
			buildErr = nodesim.BuildBinary("../..", binDir)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

// hostSysctls are settings of the machine's own namespace that an agent
// changes in the namespace it runs in. The tests run agents only inside
// throwaway node namespaces; TestMain checks the machine's values are
// unchanged afterwards and puts them back if not.
var hostSysctls = []string{"/proc/sys/net/ipv4/ip_forward", "/proc/sys/net/ipv6/conf/all/forwarding"}

func TestMain(m *testing.M) {
	_, _ = nodesim.SweepStale(nsPrefix)
	before := map[string][]byte{}
	for _, p := range hostSysctls {
		before[p], _ = os.ReadFile(p)
	}
	code := m.Run()
	for _, p := range hostSysctls {
		if after, _ := os.ReadFile(p); string(after) != string(before[p]) {
			fmt.Fprintf(os.Stderr, "FAIL: a test changed the machine's %s from %q to %q; restored\n", p, before[p], after)
			_ = os.WriteFile(p, before[p], 0o644)
			code = 1
		}
	}
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// newNode starts a node namespace with an agent; everything is removed when
// the test ends, also on failure.
func newNode(t *testing.T, o nodesim.NodeOptions) *nodesim.Node {
	t.Helper()
	testenv.Privileged(t)
	o.Prefix = nsPrefix
	o.BinDir = builtBinary(t)
	if o.WorkDir == "" {
		o.WorkDir = t.TempDir()
	}
	n, err := nodesim.NewNode(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent log:\n%s", n.AgentLog())
		}
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := n.StartAgent(ctx); err != nil {
		t.Fatal(err)
	}
	return n
}

// newPod creates a pod network namespace removed when the test ends.
func newPod(t *testing.T) ns.NetNS {
	t.Helper()
	p, err := nodesim.Create(nodesim.Name(nsPrefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = nodesim.Delete(p) })
	return p
}

// cniCode returns the CNI error code of err, or 0.
func cniCode(err error) uint {
	var e *types.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// asResult converts an ADD result to the 1.1.0 form.
func asResult(t *testing.T, r types.Result) *types100.Result {
	t.Helper()
	res, err := types100.GetResult(r)
	if err != nil {
		t.Fatalf("convert result: %v", err)
	}
	return res
}

func podRuntime(id string, pod ns.NetNS) *libcni.RuntimeConf {
	return nodesim.Runtime(id, pod, "eth0", "default", fmt.Sprintf("pod-%s", id))
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
