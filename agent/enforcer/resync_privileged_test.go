//go:build linux

package enforcer

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"lockstep.dev/lockstep/agent/datapath"
	"lockstep.dev/lockstep/probe/nodesim"
	"lockstep.dev/lockstep/test/seedtest"
	"lockstep.dev/lockstep/test/testenv"
)

// The periodic resync puts back the eBPF filters someone removed from a
// pod's host veth (`tc filter del dev ls-a ingress`): until then the pod's
// egress was not enforced.
func TestPrivilegedResyncReattachesRemovedFilter(t *testing.T) {
	testenv.Privileged(t)
	dir := t.TempDir()
	if err := unix.Mount("bpffs", dir, "bpf", 0, "mode=0700"); err != nil {
		t.Fatalf("mount private bpffs on %s: %v", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	root := filepath.Join(dir, "lockstep")
	dp, err := datapath.Load(datapath.Options{PinRoot: root})
	if err != nil {
		t.Fatalf("load the eBPF dataplane: %v", err)
	}
	t.Cleanup(func() {
		dp.Close()
		if err := datapath.Remove(root); err != nil {
			t.Errorf("remove pins: %v", err)
		}
	})
	node, err := nodesim.Create(nodesim.Name("lsenf"))
	if err != nil {
		t.Fatalf("create netns: %v", err)
	}
	t.Cleanup(func() {
		if err := nodesim.Delete(node); err != nil {
			t.Errorf("delete netns: %v", err)
		}
	})
	// The seed's endpoints' host veths, their peers in the same netns.
	err = node.Do(func(ns.NetNS) error {
		for _, name := range []string{"ls-a", "ls-b"} {
			if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "-p"}); err != nil {
				return fmt.Errorf("add veth %s: %w", name, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}

	e := New(seedtest.Store(t), dp, nil)
	ctx := context.Background()
	// filters lists the BPF filters of ls-a's hooks.
	filters := func() (ingress, egress int) {
		t.Helper()
		err := node.Do(func(ns.NetNS) error {
			link, err := netlink.LinkByName("ls-a")
			if err != nil {
				return err
			}
			for _, h := range []struct {
				parent uint32
				n      *int
			}{{netlink.HANDLE_MIN_INGRESS, &ingress}, {netlink.HANDLE_MIN_EGRESS, &egress}} {
				fs, err := netlink.FilterList(link, h.parent)
				if err != nil {
					return err
				}
				*h.n = len(fs)
			}
			return nil
		})
		if err != nil {
			t.Fatalf("list filters of ls-a: %v", err)
		}
		return ingress, egress
	}
	if err := node.Do(func(ns.NetNS) error { return e.Sync(ctx) }); err != nil {
		t.Fatalf("first apply: %v", err)
	}
	if in, out := filters(); in != 1 || out != 1 {
		t.Fatalf("after the first apply: %d ingress and %d egress filters on ls-a, want 1 and 1", in, out)
	}

	// Someone removes the ingress filter (what the pod sends).
	err = node.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName("ls-a")
		if err != nil {
			return err
		}
		fs, err := netlink.FilterList(link, netlink.HANDLE_MIN_INGRESS)
		if err != nil {
			return err
		}
		for _, f := range fs {
			if err := netlink.FilterDel(f); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("remove ls-a's ingress filter: %v", err)
	}
	if in, _ := filters(); in != 0 {
		t.Fatalf("%d ingress filters left on ls-a after removing it", in)
	}
	var attached bool
	if err := node.Do(func(ns.NetNS) (err error) { attached, err = dp.Attached("ls-a"); return err }); err != nil || attached {
		t.Fatalf("Attached(ls-a) = %v, %v with its ingress filter gone; want false", attached, err)
	}
	// The resync finds it gone and attaches it again.
	if err := node.Do(func(ns.NetNS) error { return e.Resync(ctx) }); err != nil {
		t.Fatalf("resync: %v", err)
	}
	if in, out := filters(); in != 1 || out != 1 {
		t.Errorf("after the resync: %d ingress and %d egress filters on ls-a, want 1 and 1", in, out)
	}
	if err := node.Do(func(ns.NetNS) (err error) { attached, err = dp.Attached("ls-a"); return err }); err != nil || !attached {
		t.Errorf("Attached(ls-a) = %v, %v after the resync; want true", attached, err)
	}
	if got := e.Reattached(); got != 1 {
		t.Errorf("Reattached() = %d, want 1", got)
	}
}
