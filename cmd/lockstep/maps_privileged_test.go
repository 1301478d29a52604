//go:build linux

package main

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"lockstep.dev/lockstep/agent/datapath"
	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/test/testenv"
)

// runMaps runs `lockstep maps ARGS...` in the test process and returns
// what it printed.
func runMaps(t *testing.T, root string, args ...string) string {
	t.Helper()
	cmd := newMapsCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(append([]string{"--bpf-root", root}, args...))
	if err := cmd.Execute(); err != nil {
		t.Fatalf("lockstep maps %s: %v\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String()
}

// `lockstep maps list` shows the Service maps with their entries, and
// `lockstep maps dump` decodes them: the frontend, its backends per
// parity.
func TestPrivilegedMapsShowServices(t *testing.T) {
	testenv.Privileged(t)
	d, root := loadPrivateDatapath(t)
	fe := policy.ServiceFrontend{Addr: netip.MustParseAddr("10.96.0.10"), Port: 80, Proto: policyapi.ProtoTCP}
	if err := d.Apply(&policy.Desired{Services: map[policy.ServiceFrontend]*policy.ServiceEntry{
		fe: {Service: "ns/web", Backends: []policy.ServiceBackend{
			{Addr: netip.MustParseAddr("10.0.0.2"), Port: 8080},
			{Addr: netip.MustParseAddr("10.0.0.3"), Port: 8080},
		}},
	}}); err != nil {
		t.Fatalf("Apply: %v", err)
	}

	list := runMaps(t, root, "list")
	for _, want := range []string{"lockstep_services", "lockstep_backends", "lockstep_svc_ct", "lockstep_affinity"} {
		if !strings.Contains(list, want) {
			t.Errorf("maps list lacks %s:\n%s", want, list)
		}
	}
	for _, line := range strings.Split(list, "\n") {
		f := strings.Fields(line)
		if len(f) == 6 && f[0] == "lockstep_services" && f[5] != "1" {
			t.Errorf("maps list: lockstep_services has %s entries, want 1", f[5])
		}
	}

	var svcs []struct {
		Key   string
		Value struct {
			ID    uint32
			Count [2]uint16
		}
	}
	if err := json.Unmarshal([]byte(runMaps(t, root, "dump", "lockstep_services", "-o", "json")), &svcs); err != nil {
		t.Fatal(err)
	}
	gen := d.Generation() & 1
	if len(svcs) != 1 || svcs[0].Key != "tcp 10.96.0.10:80" || svcs[0].Value.Count[gen] != 2 {
		t.Errorf("dump lockstep_services: %+v, want tcp 10.96.0.10:80 with 2 backends in parity %d", svcs, gen)
	}
	var bes []struct {
		Key   struct{ ID, Slot, Parity uint32 }
		Value struct {
			Addr string
			Port uint16
		}
	}
	if err := json.Unmarshal([]byte(runMaps(t, root, "dump", "lockstep_backends", "-o", "json")), &bes); err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, b := range bes {
		if b.Key.Parity == gen && b.Key.ID == svcs[0].Value.ID {
			got[netip.AddrPortFrom(netip.MustParseAddr(b.Value.Addr), b.Value.Port).String()] = true
		}
	}
	if !got["10.0.0.2:8080"] || !got["10.0.0.3:8080"] || len(got) != 2 {
		t.Errorf("dump lockstep_backends, live parity: %v, want 10.0.0.2:8080 and 10.0.0.3:8080", got)
	}
	for _, name := range []string{"lockstep_svc_ct", "lockstep_affinity"} {
		if out := runMaps(t, root, "dump", name); !strings.HasPrefix(out, "KEY") {
			t.Errorf("dump %s: %q, want a table", name, out)
		}
	}
}

// `lockstep maps dump` decodes the conntrack eviction counts by table:
// the agent's account and the programs' inserts summed over the CPUs.
func TestPrivilegedMapsShowConntrackEvictions(t *testing.T) {
	testenv.Privileged(t)
	_, root := loadPrivateDatapath(t)
	m, err := ebpf.LoadPinnedMap(filepath.Join(root, bpfmaps.CTEvictionsMap), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Put(bpfmaps.CTTableSvc, bpfmaps.CTEvictions{Deleted: 5, Untracked: 2, Evicted: 7}); err != nil {
		t.Fatal(err)
	}

	var acc []struct {
		Key   string
		Value bpfmaps.CTEvictions
	}
	if err := json.Unmarshal([]byte(runMaps(t, root, "dump", bpfmaps.CTEvictionsMap, "-o", "json")), &acc); err != nil {
		t.Fatal(err)
	}
	want := map[string]bpfmaps.CTEvictions{bpfmaps.CTMap: {}, bpfmaps.SvcCTMap: {Deleted: 5, Untracked: 2, Evicted: 7}}
	if len(acc) != len(want) {
		t.Fatalf("dump %s: %+v, want %v", bpfmaps.CTEvictionsMap, acc, want)
	}
	for _, e := range acc {
		if w, ok := want[e.Key]; !ok || e.Value != w {
			t.Errorf("dump %s: %s %+v, want %+v", bpfmaps.CTEvictionsMap, e.Key, e.Value, w)
		}
	}
	if out := runMaps(t, root, "dump", bpfmaps.CTInsertedMap); !strings.Contains(out, bpfmaps.CTMap) || !strings.Contains(out, bpfmaps.SvcCTMap) {
		t.Errorf("dump %s: %q, want a row per table", bpfmaps.CTInsertedMap, out)
	}
}

// loadPrivateDatapath loads the eBPF dataplane with its maps pinned in a
// bpffs of the test's own, removed at the end; it returns the pin root.
func loadPrivateDatapath(t *testing.T) (*datapath.Datapath, string) {
	t.Helper()
	dir := t.TempDir()
	if err := unix.Mount("bpffs", dir, "bpf", 0, "mode=0700"); err != nil {
		t.Fatalf("mount private bpffs on %s: %v", dir, err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	root := filepath.Join(dir, "lockstep")
	d, err := datapath.Load(datapath.Options{PinRoot: root})
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	t.Cleanup(func() { d.Close(); datapath.Remove(root) })
	return d, root
}
