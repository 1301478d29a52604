//go:build linux

package datapath

import (
	"testing"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/test/testenv"
)

// A burst of new connections past lockstep_ct's capacity makes its LRU
// evict: the eviction count says exactly how many of the burst's entries
// are gone, a connection reopened over its own entry is no eviction,
// entries the agent deletes (expired, of a removed endpoint) are none
// either, and the count survives an agent restart.
func TestPrivilegedConntrackEvictionsCounted(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.stopReclaimer() // the test runs it
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, scenario(false, false))
	onOneCPU(t)

	// One TCP connection, reset and opened again over its closing entry:
	// one key, written twice.
	runSteps(t,
		step{"SYN", d.fromPod, with(flowRequest, tcpSYN), actOK},
		step{"RST", d.fromPod, with(flowRequest, tcpRST), actOK},
		step{"SYN reopening", d.fromPod, with(flowRequest, tcpSYN), actOK},
	)
	if got := evictedNow(t, d); got != 0 {
		t.Fatalf("a connection reopened over its own entry: %d evictions, want 0", got)
	}
	if got := countCT(t, d, loIfindex); got != 1 {
		t.Fatalf("%d entries after the reopened connection, want 1", got)
	}

	// A burst of new flows past the table's capacity. The shares are off:
	// the reclaimer's last run is a minute old.
	staleReclaim(t, d)
	flood := bpfmaps.CTCapacity + 20000
	if got := newFlows(t, d, d.fromPod, podV4, "10.0.0.3", flood); got != flood {
		t.Fatalf("%d of %d new flows passed, want all", got, flood)
	}
	n, err := d.reclaimConntrack()
	if err != nil {
		t.Fatal(err)
	}
	made := 1 + flood // keys the test made: the TCP connection's and the burst's
	// Nothing deleted them but the reclaim (the RST entry, once 10 s old):
	// every other key missing was evicted.
	evicted := made - n - countCT(t, d, loIfindex)
	if evicted < flood-bpfmaps.CTCapacity {
		t.Fatalf("%d entries of %d gone from a table of %d: the burst did not fill it", evicted, made, bpfmaps.CTCapacity)
	}
	t.Logf("%d new keys, %d evicted, %d deleted, %d left", made, evicted, n, made-n-evicted)
	got, err := d.ConntrackEvictions()
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]uint64{bpfmaps.CTMap: uint64(evicted), bpfmaps.SvcCTMap: 0}; got[bpfmaps.CTMap] != want[bpfmaps.CTMap] || got[bpfmaps.SvcCTMap] != 0 {
		t.Fatalf("evictions after a burst of %d flows: %v, want %v", flood, got, want)
	}

	// The flush of a removed endpoint deletes its entries, and expired
	// entries are deleted: neither is an eviction.
	if _, err := d.flushConntrack(map[uint32]struct{}{loIfindex: {}}); err != nil {
		t.Fatal(err)
	}
	if got := evictedNow(t, d); got != uint64(evicted) {
		t.Errorf("after the flush of the endpoint's entries: %d evictions, want still %d", got, evicted)
	}
	staleReclaim(t, d)
	if got := newFlows(t, d, d.fromPod, podV4, "10.0.0.3", 1000); got != 1000 {
		t.Fatalf("%d of 1000 new flows passed, want all", got)
	}
	ageCT(t, d, loIfindex)
	if got := evictedNow(t, d); got != uint64(evicted) {
		t.Errorf("after the reclaim of expired entries: %d evictions, want still %d", got, evicted)
	}
	if got := countCT(t, d, loIfindex); got != 0 {
		t.Errorf("%d entries left after the reclaim of expired ones, want 0", got)
	}

	// The next agent reports the count as it was.
	d.Close()
	d2, err := Load(Options{PinRoot: d.pinRoot})
	if err != nil {
		t.Fatalf("reload: %v", err)
	}
	defer d2.Close()
	if got, err := d2.ConntrackEvictions(); err != nil || got[bpfmaps.CTMap] != uint64(evicted) {
		t.Errorf("the next agent's evictions: %v (%v), want %d from %s", got, err, evicted, bpfmaps.CTMap)
	}
}

// evictedNow runs the reclaimer and returns lockstep_ct's evictions.
func evictedNow(tb testing.TB, d *Datapath) uint64 {
	tb.Helper()
	if _, err := d.reclaimConntrack(); err != nil {
		tb.Fatalf("reclaim: %v", err)
	}
	got, err := d.ConntrackEvictions()
	if err != nil {
		tb.Fatal(err)
	}
	return got[bpfmaps.CTMap]
}

// staleReclaim makes the reclaimer's last run a minute old, so that the
// programs enforce no share.
func staleReclaim(tb testing.TB, d *Datapath) {
	tb.Helper()
	if err := d.ctReleased.Put(bpfmaps.CTReclaimKey, coarseNow(tb)-60e9); err != nil {
		tb.Fatal(err)
	}
}

// Translated connections past lockstep_svc_ct's capacity (two entries
// each) make its LRU evict, counted exactly as lockstep_ct's are.
func TestPrivilegedServiceConntrackEvictionsCounted(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.stopReclaimer()
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, affinityScenario(affinityBackends))
	onOneCPU(t)
	staleReclaim(t, d)

	// Every connection from its own source port: from the IPv4 address
	// to one frontend, then from the IPv6 one to another.
	made := make(map[bpfmaps.CTKey]struct{})
	connect := func(src, svc string, sport uint16) {
		syn := packet{src: src, dst: svc, proto: policyapi.ProtoTCP, sport: sport, dport: 80}
		ret, out := runOut(t, d.fromPod, csumFrame(syn))
		w := mustWire(t, "SYN", out)
		if ret != actOK || w.dport != 8080 {
			t.Fatalf("SYN from %s:%d to %s: %s to %s:%d, want OK to a backend's 8080", src, sport, svc, actName(ret), w.dst, w.dport)
		}
		made[ctKeyOf(loIfindex, syn)] = struct{}{}
		syn.dst, syn.dport = w.dst.String(), w.dport
		made[ctKeyOf(loIfindex, syn)] = struct{}{}
	}
	for sport := 1024; sport <= 65535; sport++ {
		connect(podV4, svcRandom4, uint16(sport))
	}
	for sport := 1024; sport < 11024; sport++ {
		connect(podV6, svcWeb6, uint16(sport))
	}
	n, err := d.reclaimConntrack()
	if err != nil {
		t.Fatal(err)
	}
	left, err := bpfmaps.Count(d.svcCT)
	if err != nil {
		t.Fatal(err)
	}
	evicted := len(made) - n - left
	if evicted < len(made)-bpfmaps.SvcCTCapacity {
		t.Fatalf("%d entries of %d gone from a table of %d: the connections did not fill it", evicted, len(made), bpfmaps.SvcCTCapacity)
	}
	t.Logf("%d new keys, %d evicted, %d deleted, %d left", len(made), evicted, n, left)
	got, err := d.ConntrackEvictions()
	if err != nil {
		t.Fatal(err)
	}
	if got[bpfmaps.SvcCTMap] != uint64(evicted) || got[bpfmaps.CTMap] != 0 {
		t.Errorf("evictions after %d translated connections: %v, want %d from %s and none from %s", len(made)/2, got, evicted, bpfmaps.SvcCTMap, bpfmaps.CTMap)
	}
}
