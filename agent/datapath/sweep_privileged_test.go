//go:build linux

package datapath

import (
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/test/testenv"
)

// After a switch to another dataplane, Sweep must find and remove the
// filters and pins a previous agent left, without a loaded Datapath.
func TestPrivilegedSweepRemovesWhatAnotherAgentLeft(t *testing.T) {
	testenv.Privileged(t)
	hostIf := api.HostIfName("sweep-test", "eth0")
	node, _ := newVethPair(t, hostIf, "lsdp-sw0")
	d := newTestDatapath(t)
	err := node.Do(func(ns.NetNS) error {
		if err := d.Attach(hostIf); err != nil {
			return err
		}
		d.Close() // the old agent is gone; its filters and pins stay
		left, err := Leftovers(d.PinRoot())
		if err != nil {
			return err
		}
		// two filters, and every map pinned
		if left < 3 {
			t.Errorf("Leftovers = %d before the sweep; want the 2 filters and the pinned maps", left)
		}
		if err := Sweep(d.PinRoot()); err != nil {
			return err
		}
		if err := Sweep(d.PinRoot()); err != nil {
			t.Errorf("second Sweep: %v (must be idempotent)", err)
		}
		left, err = Leftovers(d.PinRoot())
		if err != nil {
			return err
		}
		if left != 0 {
			t.Errorf("Leftovers = %d after the sweep, want 0", left)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
