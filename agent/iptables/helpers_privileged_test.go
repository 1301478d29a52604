//go:build linux

package iptables

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"lockstep.dev/lockstep/probe/nodesim"
	"lockstep.dev/lockstep/test/testenv"
)

// nsPrefix names the throwaway namespaces of these tests.
const nsPrefix = "lsipt"

var sweepOnce sync.Once

// newNetns creates a throwaway network namespace, deleted (with every rule
// and set in it) when tb ends, pass or fail.
func newNetns(tb testing.TB) ns.NetNS {
	tb.Helper()
	sweepOnce.Do(func() { _, _ = nodesim.SweepStale(nsPrefix) })
	n, err := nodesim.Create(nodesim.Name(nsPrefix))
	if err != nil {
		tb.Fatalf("create netns: %v", err)
	}
	tb.Cleanup(func() {
		if err := nodesim.Delete(n); err != nil {
			tb.Errorf("delete netns: %v", err)
		}
	})
	return n
}

// nsRunner runs every command inside a namespace: the child is forked from
// a thread that ns.Do moved into it. Nothing runs in the host's namespace.
type nsRunner struct {
	ns ns.NetNS
}

func (r nsRunner) Run(ctx context.Context, name string, args []string, stdin []byte) ([]byte, error) {
	var out []byte
	var runErr error
	if err := r.ns.Do(func(ns.NetNS) error {
		out, runErr = ExecRunner{}.Run(ctx, name, args, stdin)
		return nil
	}); err != nil {
		return nil, err
	}
	return out, runErr
}

// requireTools fails (see testenv.Missing) unless both iptables modes and
// ipset are installed.
func requireTools(tb testing.TB) {
	tb.Helper()
	testenv.Privileged(tb)
	for _, tool := range []string{"iptables-legacy-restore", "iptables-nft-restore", "ip6tables-legacy-restore", "ip6tables-nft-restore", "ipset"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(tb, tool, err)
		}
	}
}

// realView reads lockstep's state of mode m from the real tools, in the
// shape the fake's view has.
func realView(tb testing.TB, r Runner, m Mode) lockstepView {
	tb.Helper()
	ctx := context.Background()
	v := lockstepView{}
	for _, f := range families {
		out, err := r.Run(ctx, m.SaveTool(f), nil, nil)
		if err != nil {
			tb.Fatalf("read %s rules: %v", f, err)
		}
		tables, err := parseSave(out)
		if err != nil {
			tb.Fatal(err)
		}
		v.chains[f.index()], v.nat[f.index()] = map[string][]string{}, map[string][]string{}
		if t := tables["filter"]; t != nil {
			chains, foreign := lockstepIn(t)
			v.chains[f.index()] = chains
			for _, line := range foreign {
				v.jumps[f.index()] = append(v.jumps[f.index()], strings.TrimPrefix(line, "-A "))
			}
			slices.Sort(v.jumps[f.index()])
		}
		if t := tables["nat"]; t != nil {
			chains, foreign := lockstepInExcept(t, func(c string) bool { return !isServiceChain(c) })
			v.nat[f.index()] = chains
			for _, line := range foreign {
				v.natJumps[f.index()] = append(v.natJumps[f.index()], strings.TrimPrefix(line, "-A "))
			}
			slices.Sort(v.natJumps[f.index()])
		}
	}
	out, err := r.Run(ctx, ipsetTool, []string{"save"}, nil)
	if err != nil {
		tb.Fatalf("read ipsets: %v", err)
	}
	sets, err := parseIPSetSave(out)
	if err != nil {
		tb.Fatal(err)
	}
	v.sets = map[string]map[string]bool{}
	for name, s := range sets {
		if isModeSet(m, name) {
			v.sets[name] = setMembers(s)
		}
	}
	return v
}

// assertRealView compares the node's real state with what the fake holds
// for the same Desired: chain by chain, rule text by rule text, member by
// member.
func assertRealView(tb testing.TB, r Runner, m Mode, want lockstepView) {
	tb.Helper()
	if diff := diffViews(realView(tb, r, m), want); diff != "" {
		tb.Fatalf("iptables-save / ipset save differ from the desired state:\n%s", diff)
	}
}

// assertClean fails unless nothing of lockstep's is left in any mode.
func assertClean(tb testing.TB, r Runner) {
	tb.Helper()
	for _, m := range []Mode{ModeNFT, ModeLegacy} {
		l, err := ListLeftovers(context.Background(), r, m)
		if err != nil {
			tb.Fatalf("list leftovers: %v", err)
		}
		if !l.Empty() {
			tb.Fatalf("left behind: %s %+v", l, l)
		}
	}
}
