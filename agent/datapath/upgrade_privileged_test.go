//go:build linux

package datapath

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cilium/ebpf"

	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/test/testenv"
)

// A policy map pinned by an agent whose policy values were smaller (before
// they carried a rule id) is replaced before the programs load: the
// verifier would otherwise judge them against the old inner template and
// refuse them.
func TestPrivilegedLoadReplacesPolicyMapOfOldLayout(t *testing.T) {
	testenv.Privileged(t)
	root := privatePinRoot(t)
	if err := os.MkdirAll(root, 0o700); err != nil {
		t.Fatal(err)
	}
	spec, err := loadEndpoint()
	if err != nil {
		t.Fatal(err)
	}
	old := spec.Maps[bpfmaps.PolicyMap].Copy()
	old.InnerMap.ValueSize -= 4 // no rule id
	old.Pinning = ebpf.PinNone
	m, err := ebpf.NewMap(old)
	if err != nil {
		t.Fatalf("create the old policy map: %v", err)
	}
	if err := m.Pin(filepath.Join(root, bpfmaps.PolicyMap)); err != nil {
		t.Fatal(err)
	}
	m.Close()

	d, err := Load(Options{PinRoot: root})
	if err != nil {
		t.Fatalf("Load over the old policy map: %v", err)
	}
	t.Cleanup(func() {
		d.Close()
		if err := Remove(root); err != nil {
			t.Errorf("Remove: %v", err)
		}
	})
	if err := d.probeInnerCompat(); err != nil {
		t.Errorf("inner maps of this agent do not fit the loaded policy map: %v", err)
	}
}
