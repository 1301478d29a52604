//go:build linux

package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/datapath"
	"lockstep.dev/lockstep/probe/nodesim"
)

// runInNode runs the built lockstep with args inside node and returns its
// standard output, standard error and exit code.
func runInNode(t *testing.T, node ns.NetNS, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(builtBinary(t), "lockstep"), args...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := node.Do(func(ns.NetNS) error { return cmd.Run() })
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.ExitCode()
	default:
		t.Fatalf("run lockstep %s: %v", strings.Join(args, " "), err)
	}
	return out.String(), errOut.String(), code
}

// addForeignFilter attaches a BPF filter that is not lockstep's (its
// program is not named lockstep_*) to link's ingress, next to lockstep's.
func addForeignFilter(t *testing.T, node ns.NetNS, link string) {
	t.Helper()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Name: "not_lockstep", Type: ebpf.SchedCLS, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close() // the filter holds its own reference
	err = node.Do(func(ns.NetNS) error {
		l, err := netlink.LinkByName(link)
		if err != nil {
			return err
		}
		return netlink.FilterAdd(&netlink.BpfFilter{
			FilterAttrs: netlink.FilterAttrs{LinkIndex: l.Attrs().Index, Parent: netlink.HANDLE_MIN_INGRESS, Handle: 1, Priority: 7, Protocol: unix.ETH_P_ALL},
			Fd:          prog.FD(), Name: "not_lockstep", DirectAction: true,
		})
	})
	if err != nil {
		t.Fatalf("attach a foreign filter to %s: %v", link, err)
	}
}

// TestPrivilegedUninstallRemovesEverything puts every kind of state lockstep
// keeps on a node namespace — the agent's (eBPF filters on two pods, pinned
// maps, masquerade rules, socket, state file), install-cni's files, policy
// chains and ipsets of both iptables modes, routes of protocol 108 — next
// to look-alikes that are not lockstep's, kills the agent, and checks that
// `lockstep uninstall` removes exactly lockstep's, says so, removes nothing
// the second time, purges the state only when asked, refuses while an
// agent runs, and fails loudly on what it cannot remove.
func TestPrivilegedUninstallRemovesEverything(t *testing.T) {
	node := newNode(t, nodesim.NodeOptions{Pools: []string{"10.244.0.0/24", "fd00:10:244::/120"}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sh := func(args ...string) string { t.Helper(); return inNode(t, node.NS, args[0], args[1:]...) }

	// install-cni's files, next to a plugin and a config that are not
	// lockstep's.
	cniBin, cniConf := filepath.Join(t.TempDir(), "bin"), filepath.Join(t.TempDir(), "net.d")
	if out, _, code := runInNode(t, node.NS, "install-cni", "--cni-bin-dir", cniBin, "--cni-conf-dir", cniConf, "--socket", node.Socket); code != 0 {
		t.Fatalf("install-cni: %s", out)
	}
	foreignFiles := []string{filepath.Join(cniBin, "bridge"), filepath.Join(cniConf, "20-bridge.conflist")}
	for _, p := range foreignFiles {
		if err := os.WriteFile(p, []byte(`{"plugins":[{"type":"bridge"}]}`), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// Two pods: four lockstep filters; a filter that is not lockstep's on
	// the same veth.
	var hostIfs []string
	for _, id := range []string{"un-a", "un-b"} {
		if _, err := node.Add(ctx, podRuntime(id, newPod(t))); err != nil {
			t.Fatal(err)
		}
		hostIfs = append(hostIfs, api.HostIfName(id, "eth0"))
	}
	addForeignFilter(t, node.NS, hostIfs[0])

	// Routes: lockstep's (protocol 108) and another.
	sh("ip", "link", "add", "up0", "type", "veth", "peer", "name", "up1")
	sh("ip", "addr", "add", "192.0.2.1/24", "dev", "up0")
	sh("ip", "addr", "add", "2001:db8::1/64", "dev", "up0", "nodad")
	sh("ip", "link", "set", "up0", "up")
	sh("ip", "link", "set", "up1", "up")
	sh("ip", "route", "add", "10.245.0.0/24", "via", "192.0.2.2", "proto", "108")
	sh("ip", "-6", "route", "add", "fd00:245::/64", "via", "2001:db8::2", "proto", "108")
	sh("ip", "route", "add", "10.246.0.0/24", "via", "192.0.2.2")

	// The agent dies, leaving everything in place; policy leftovers of both
	// iptables modes join the masquerade rules it wrote (nft), with
	// kube-proxy-like rules and a set that are not lockstep's.
	if err := node.KillAgent(); err != nil {
		t.Fatal(err)
	}
	sh("ipset", "create", "kube-test", "hash:ip")
	for _, mode := range []string{"nft", "legacy"} {
		sh("ipset", "create", "lockstep-"+mode+"4-pods", "hash:ip")
		payload := "*filter\n:LOCKSTEP-FORWARD - [0:0]\n:KUBE-FORWARD - [0:0]\n" +
			"-I FORWARD 1 -m comment --comment \"lockstep: NetworkPolicy\" -j LOCKSTEP-FORWARD\n-A FORWARD -j KUBE-FORWARD\n" +
			"-A LOCKSTEP-FORWARD -m set --match-set lockstep-" + mode + "4-pods src -j RETURN\n" +
			"-A KUBE-FORWARD -m set --match-set kube-test src -j ACCEPT\nCOMMIT\n"
		restore := exec.Command("iptables-"+mode+"-restore", "--noflush")
		restore.Stdin = strings.NewReader(payload)
		if err := node.NS.Do(func(ns.NetNS) error { return restore.Run() }); err != nil {
			t.Fatalf("seed %s rules: %v", mode, err)
		}
	}
	masqLegacy := exec.Command("ip6tables-legacy-restore", "--noflush")
	masqLegacy.Stdin = strings.NewReader("*nat\n:LOCKSTEP-MASQ - [0:0]\n-I POSTROUTING 1 -j LOCKSTEP-MASQ\n-A LOCKSTEP-MASQ -s fd00:10:244::/120 -j MASQUERADE\nCOMMIT\n")
	if err := node.NS.Do(func(ns.NetNS) error { return masqLegacy.Run() }); err != nil {
		t.Fatal(err)
	}

	args := []string{"uninstall", "--cni-bin-dir", cniBin, "--cni-conf-dir", cniConf, "--bpf-root", node.BPFRoot, "--state-dir", node.StateDir, "--socket", node.Socket}
	out, errOut, code := runInNode(t, node.NS, args...)
	if code != 0 {
		t.Fatalf("uninstall exited %d:\n%s\n%s", code, out, errOut)
	}
	t.Logf("uninstall:\n%s", out)
	for _, want := range []string{
		"removed " + filepath.Join(cniConf, "10-lockstep.conflist"),
		"removed " + filepath.Join(cniBin, "lockstep"),
		"removed " + filepath.Join(cniBin, "lockstep-cni"),
		"removed tc " + hostIfs[0] + " ingress filter lockstep_from_pod",
		"removed tc " + hostIfs[1] + " egress filter lockstep_to_pod",
		"removed pinned map " + filepath.Join(node.BPFRoot, "lockstep_policy"),
		"removed iptables-nft IPv4 nat chain LOCKSTEP-MASQ",
		"removed iptables-nft IPv6 nat chain LOCKSTEP-MASQ",
		"removed iptables-legacy IPv6 nat chain LOCKSTEP-MASQ",
		"removed iptables-legacy IPv4 filter chain LOCKSTEP-FORWARD",
		"removed iptables-nft IPv4 filter rule -A FORWARD",
		"removed ipset lockstep-nft4-pods",
		"removed ipset lockstep-legacy4-pods",
		"removed route 10.245.0.0/24 via 192.0.2.2 (protocol 108)",
		"removed route fd00:245::/64 via 2001:db8::2 (protocol 108)",
		"removed socket " + node.Socket,
		"kept state file " + filepath.Join(node.StateDir, "state.db"),
	} {
		if !strings.Contains(out, want+"\n") && !strings.Contains(out, want+" ") && !strings.Contains(out, want+":") {
			t.Errorf("output lacks %q", want)
		}
	}

	// Nothing of lockstep's is left; everything else is.
	var left int
	if err := node.NS.Do(func(ns.NetNS) error {
		var err error
		left, err = datapath.Leftovers(node.BPFRoot)
		return err
	}); err != nil || left != 0 {
		t.Errorf("eBPF leftovers: %d, %v", left, err)
	}
	if out := sh("tc", "filter", "show", "dev", hostIfs[0], "ingress"); !strings.Contains(out, "not_lockstep") || strings.Contains(out, "lockstep_") {
		t.Errorf("filters on %s:\n%s", hostIfs[0], out)
	}
	for _, tool := range []string{"iptables-nft-save", "ip6tables-nft-save", "iptables-legacy-save", "ip6tables-legacy-save"} {
		if out := sh(tool); strings.Contains(out, "LOCKSTEP") || strings.Contains(out, "lockstep") {
			t.Errorf("%s still shows lockstep:\n%s", tool, out)
		}
	}
	for _, mode := range []string{"nft", "legacy"} {
		if !strings.Contains(sh("iptables-"+mode+"-save", "-t", "filter"), "-A KUBE-FORWARD -m set --match-set kube-test src -j ACCEPT") {
			t.Errorf("%s: rules that are not lockstep's were removed", mode)
		}
	}
	if out := sh("ipset", "list", "-n"); strings.Contains(out, "lockstep") || !strings.Contains(out, "kube-test") {
		t.Errorf("ipsets left:\n%s", out)
	}
	if out := sh("ip", "route", "show", "proto", "108") + sh("ip", "-6", "route", "show", "proto", "108"); strings.TrimSpace(out) != "" {
		t.Errorf("routes of protocol 108 left:\n%s", out)
	}
	if !strings.Contains(sh("ip", "route"), "10.246.0.0/24 via 192.0.2.2") {
		t.Error("a route that is not lockstep's was removed")
	}
	for _, p := range []string{filepath.Join(cniBin, "lockstep"), filepath.Join(cniBin, "lockstep-cni"), filepath.Join(cniConf, "10-lockstep.conflist"), node.Socket} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s left (%v)", p, err)
		}
	}
	for _, p := range append(foreignFiles, filepath.Join(node.StateDir, "state.db")) {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v; want it kept", p, err)
		}
	}

	// Idempotent.
	out, errOut, code = runInNode(t, node.NS, args...)
	if code != 0 || strings.Contains(out, "removed ") || !strings.Contains(out, "nothing of lockstep's left to remove") {
		t.Errorf("second uninstall exited %d:\n%s\n%s", code, out, errOut)
	}
	// The state goes only when asked.
	out, _, code = runInNode(t, node.NS, append(args, "--purge-state")...)
	if code != 0 || !strings.Contains(out, "removed state file") || !strings.Contains(out, "removed state directory "+node.StateDir) {
		t.Errorf("uninstall --purge-state exited %d:\n%s", code, out)
	}
	if _, err := os.Stat(node.StateDir); !os.IsNotExist(err) {
		t.Errorf("state directory left: %v", err)
	}

	// Something it cannot remove: reported, the rest removed, exit 1.
	if err := os.MkdirAll(filepath.Join(cniBin, "lockstep", "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cniBin, "lockstep-cni"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = runInNode(t, node.NS, args...)
	if code == 0 || !strings.Contains(errOut, "could not remove") || !strings.Contains(errOut, "is a directory") ||
		!strings.Contains(errOut, "uninstall incomplete") || !strings.Contains(out, "removed "+filepath.Join(cniBin, "lockstep-cni")) {
		t.Errorf("uninstall with an unremovable path exited %d:\n%s\n%s", code, out, errOut)
	}
	if err := os.RemoveAll(filepath.Join(cniBin, "lockstep")); err != nil {
		t.Fatal(err)
	}

	// A running agent would put it all back: refused, nothing removed.
	if err := node.StartAgent(ctx); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = runInNode(t, node.NS, args...)
	if code == 0 || !strings.Contains(errOut, "a lockstep agent is running") || strings.Contains(out, "removed") {
		t.Errorf("uninstall next to a running agent exited %d:\n%s\n%s", code, out, errOut)
	}
	if _, err := os.Stat(node.Socket); err != nil {
		t.Errorf("the running agent's socket: %v", err)
	}
}
