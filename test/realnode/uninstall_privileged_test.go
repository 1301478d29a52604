//go:build linux

package realnode_test

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"lockstep.dev/lockstep/test/realnode"
)

// TestPrivilegedRealNodeUninstall removes lockstep as deploy/README.md tells
// a user to: `kubectl delete -k deploy`, then the uninstall DaemonSet. Every
// node must be left with nothing of lockstep's: no CNI config or binary, no
// tc filter, no pinned map, no iptables chain or ipset, no route of its
// protocol. Then lockstep is installed again, as after an uninstall, and
// pods get an address again. It runs last (file order); a test that runs
// after it brings up a fresh cluster.
func TestPrivilegedRealNodeUninstall(t *testing.T) {
	c := cluster(t)
	defer resetShared()
	ctx := t.Context()
	deploy := filepath.Join(shared.repo, "deploy")
	if _, err := c.Kubectl(ctx, "delete", "-k", deploy, "--wait=true", "--timeout=3m"); err != nil {
		t.Fatal(err)
	}
	// The agents are gone once their pods are.
	err := realnode.Poll(ctx, 2*time.Minute, time.Second, "the agent pods to be gone", func() (bool, string, error) {
		out, err := c.Kubectl(ctx, "-n", "kube-system", "get", "pods", "-l", "app.kubernetes.io/name=lockstep-agent", "-o", "name")
		return err == nil && strings.TrimSpace(string(out)) == "", string(out), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(deploy, "uninstall", "uninstall.yaml")
	if _, err := c.Kubectl(ctx, "apply", "-f", manifest); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(ctx, "-n", "kube-system", "rollout", "status", "daemonset/lockstep-uninstall", "--timeout=3m"); err != nil {
		logs, _ := c.Kubectl(ctx, "-n", "kube-system", "logs", "-l", "app.kubernetes.io/name=lockstep-uninstall", "-c", "uninstall", "--prefix")
		t.Fatalf("%v\n%s", err, logs)
	}
	logs, err := c.Kubectl(ctx, "-n", "kube-system", "logs", "-l", "app.kubernetes.io/name=lockstep-uninstall", "-c", "uninstall", "--prefix")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("lockstep uninstall said:\n%s", logs)
	if _, err := c.Kubectl(ctx, "delete", "-f", manifest, "--wait=true"); err != nil {
		t.Fatal(err)
	}

	// What a node would still have, one shell line per kind of object.
	const leftovers = `
ls /etc/cni/net.d/10-lockstep.conflist /opt/cni/bin/lockstep /opt/cni/bin/lockstep-cni /sys/fs/bpf/lockstep /run/lockstep/lockstep.sock 2>/dev/null
for l in $(ls /sys/class/net); do tc filter show dev $l ingress; tc filter show dev $l egress; done
for t in iptables-nft-save ip6tables-nft-save iptables-legacy-save ip6tables-legacy-save; do $t 2>/dev/null | grep -i lockstep; done
ipset list -n | grep lockstep
ip route show proto 108; ip -6 route show proto 108
true`
	for _, h := range c.Nodes {
		out, err := c.Exec(ctx, h, "sh", "-c", leftovers)
		if err != nil {
			t.Fatal(err)
		}
		if s := strings.TrimSpace(string(out)); s != "" {
			t.Errorf("%s still has, after the uninstall:\n%s", h.Name, s)
		}
	}

	// Installed again, it works again.
	if err := c.InstallLockstep(ctx, shared.repo, "ebpf"); err != nil {
		t.Fatal(err)
	}
	const ns = "reinstalled"
	namespace(t, c, ns, nil)
	apply(t, c, agnhostPod(ns, "again", node1, nil))
	if p := waitReady(t, c, ns, "again")["again"]; !inPool(p.ip("4")) {
		t.Errorf("after a reinstall a pod got %q", p.ip("4"))
	}
}
