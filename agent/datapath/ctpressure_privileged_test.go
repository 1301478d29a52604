//go:build linux

package datapath

import (
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/test/testenv"
)

// conntrackHeld reads the node's estimate of the conntrack entries it
// holds.
func conntrackHeld(tb testing.TB, d *Datapath) uint64 {
	tb.Helper()
	held, err := d.ConntrackHeld()
	if err != nil {
		tb.Fatal(err)
	}
	return held
}

// A busy pod on a node whose tables have room is never refused, whatever
// its share: the shares bite only under pressure, and then only the
// endpoint beyond its share; another endpoint within its own, and the
// node's probes, still get their new connections.
func TestPrivilegedConntrackShareOnlyUnderPressure(t *testing.T) {
	testenv.Privileged(t)
	d, node, otherIdx := shareSetup(t)

	// Below the threshold: past the share, nothing refused.
	before := counter(t, d, bpfmaps.ReasonCTShare)
	flood := bpfmaps.CTShareLimit + 100
	var passed int
	err := node.Do(func(ns.NetNS) error {
		passed = newFlows(t, d, d.fromPod, podV4, "10.0.0.3", flood)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if passed != flood {
		t.Errorf("%d new flows on a node below the pressure threshold: %d passed, want all", flood, passed)
	}
	if got := counter(t, d, bpfmaps.ReasonCTShare) - before; got != 0 {
		t.Errorf("conntrack-share grew by %d below the pressure threshold, want 0", got)
	}
	if got := conntrackHeld(t, d); got != uint64(flood) {
		t.Errorf("the node's estimate after %d admitted flows: %d, want %d", flood, got, flood)
	}
	// A reclaim releases nothing of entries still live.
	reclaimerRan(t, d)
	if got := conntrackHeld(t, d); got != uint64(flood) {
		t.Errorf("the node's estimate after a reclaim of %d live entries: %d, want %d", flood, got, flood)
	}

	// Above it: the endpoint beyond its share is refused, the other
	// endpoint within its share and the node's probe are admitted.
	underPressure(t, d)
	err = node.Do(func(ns.NetNS) error {
		raw := frame(packet{src: podV4, dst: "10.0.0.4", proto: policyapi.ProtoUDP, sport: 9, dport: 53})
		if got := runRaw(t, d.fromPod, raw); got != actShot {
			t.Errorf("a new flow of the endpoint beyond its share, under pressure: got %s, want SHOT", actName(got))
		}
		for i := range 100 {
			raw := frame(packet{src: otherV4, dst: "10.0.0.2", proto: policyapi.ProtoUDP, sport: uint16(3000 + i), dport: 53})
			if got := runAtIfindex(t, d.fromPod, raw, otherIdx); got != actOK {
				t.Fatalf("the other endpoint's flow %d under pressure: got %s, want OK", i, actName(got))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	probe := packet{src: "10.0.0.3", dst: podV4, proto: policyapi.ProtoTCP, sport: 5555, dport: 8080, fromNode: true}
	if got := run(t, d.toPod, probe); got != actOK {
		t.Errorf("the node's probe to the pod under pressure: got %s, want OK", actName(got))
	}
	if got := counter(t, d, bpfmaps.ReasonCTShare) - before; got != 1 {
		t.Errorf("conntrack-share grew by %d, want 1 (the one refused flow)", got)
	}
	if got, want := conntrackHeld(t, d), uint64(bpfmaps.CTPressure+100+1); got != want {
		t.Errorf("the node's estimate after the other's flows and the probe: %d, want %d", got, want)
	}
	shares, err := d.ConntrackShares()
	if err != nil {
		t.Fatal(err)
	}
	if got, want := shares[podIf], (ConntrackShare{Entries: uint64(flood) + 1, Refused: 1}); got != want {
		t.Errorf("%s's share: %+v, want %+v", podIf, got, want)
	}
	if got, want := shares[otherIf], (ConntrackShare{Entries: 100}); got != want {
		t.Errorf("%s's share: %+v, want %+v", otherIf, got, want)
	}
	if _, ok := shares["ifindex 0"]; ok {
		t.Errorf("the node's count is listed as an endpoint's share: %v", shares)
	}
}

// The node's estimate follows the entries that go, whether the agent
// deleted them (expired) or the LRU evicted them: once the reclaimer has
// released them, the node is no longer under pressure and the endpoint
// beyond its share is admitted again.
func TestPrivilegedConntrackPressureFollowsRelease(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, scenario(false, false))
	for _, tc := range []struct {
		name string
		gone func(t *testing.T) // makes the pod's entries go
	}{
		{"expired and deleted", func(t *testing.T) { ageCT(t, d, loIfindex) }},
		// Taken out behind the agent's back, as an LRU evicts.
		{"evicted", func(t *testing.T) { deleteCTEntries(t, d) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d.flushCT(t)
			onOneCPU(t)
			reclaimerRan(t, d)
			evictedBefore := evictedNow(t, d)

			// The pod alone brings the node to the threshold, then
			// stops at it.
			flood := bpfmaps.CTPressure + 100
			if got := newFlows(t, d, d.fromPod, podV4, "10.0.0.3", flood); got != bpfmaps.CTPressure {
				t.Errorf("%d new flows of one pod: %d passed, want %d (the pressure threshold)", flood, got, bpfmaps.CTPressure)
			}
			if got := conntrackHeld(t, d); got != bpfmaps.CTPressure {
				t.Errorf("the node's estimate: %d, want %d", got, bpfmaps.CTPressure)
			}
			// Without a reclaim, entries that went are still held.
			tc.gone(t)
			if got := newFlows(t, d, d.fromPod, podV4, "10.0.0.4", 10); got != 0 {
				t.Errorf("new flows before the reclaim released anything: %d of 10 passed, want 0", got)
			}

			reclaimerRan(t, d)
			if got := conntrackHeld(t, d); got != 0 {
				t.Errorf("the node's estimate after the reclaim: %d, want 0", got)
			}
			if got := evictedNow(t, d) - evictedBefore; tc.name == "evicted" && got != bpfmaps.CTPressure {
				t.Errorf("evictions counted: %d, want %d", got, bpfmaps.CTPressure)
			}
			more := bpfmaps.CTShareLimit + 100
			if got := newFlows(t, d, d.fromPod, podV4, "10.0.0.5", more); got != more {
				t.Errorf("%d new flows after the reclaim: %d passed, want all", more, got)
			}
		})
	}
}

// A pod's translated connections, two lockstep_svc_ct entries each,
// count towards the node's estimate as its untranslated ones do: one pod
// alone opens them until the node holds the pressure threshold, half of
// one table, and is refused beyond it while beyond its share.
func TestPrivilegedTranslatedConntrackPressure(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.stopReclaimer()
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, affinityScenario(affinityBackends))
	d.flushCT(t)
	onOneCPU(t)
	reclaimerRan(t, d)

	before := counter(t, d, bpfmaps.ReasonCTShare)
	const tries = bpfmaps.CTPressure/2 + 100
	passed := 0
	for i := range tries {
		syn := packet{src: podV4, dst: svcRandom4, proto: policyapi.ProtoTCP, sport: uint16(1024 + i), dport: 80}
		if runRaw(t, d.fromPod, csumFrame(syn)) == actOK {
			passed++
		}
	}
	if want := bpfmaps.CTPressure / 2; passed != want {
		t.Errorf("%d translated connections of one pod: %d passed, want %d (the threshold's entries, two each)", tries, passed, want)
	}
	if got := counter(t, d, bpfmaps.ReasonCTShare) - before; got != uint64(tries-passed) {
		t.Errorf("conntrack-share grew by %d, want %d", got, tries-passed)
	}
	if got := conntrackHeld(t, d); got != bpfmaps.CTPressure {
		t.Errorf("the node's estimate: %d, want %d", got, bpfmaps.CTPressure)
	}
}
