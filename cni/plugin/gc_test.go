package plugin

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"lockstep.dev/lockstep/agent/api"
)

// TestGCSweep: the runtime still knows pod A; the agent releases pod B; a
// crashed ADD left pod C's link with no agent record. GC keeps A and
// removes B and C.
func TestGCSweep(t *testing.T) {
	h := newHarness(t)
	linkA := api.HostIfName("a", "eth0")
	linkB := api.HostIfName("b", "eth0")
	linkC := api.HostIfName("c", "eth0")
	for _, l := range []string{linkA, linkB, linkC} {
		h.net.links[l] = true
	}
	h.agent.gcResp = api.GCResponse{Released: []api.Endpoint{{Attachment: api.Attachment{ContainerID: "b", IfName: "eth0"}, HostIfName: linkB}}}
	stdin := h.conf("1.1.0", `,"cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}]`)

	if err := h.plugin.gc(t.Context(), h.cmdArgs(stdin)); err != nil {
		t.Fatalf("gc() error = %v", err)
	}
	if want := []api.Attachment{{ContainerID: "a", IfName: "eth0"}}; !slices.Equal(h.agent.lastGC.Valid, want) {
		t.Fatalf("agent got valid %v, want %v", h.agent.lastGC.Valid, want)
	}
	if !h.net.links[linkA] || h.net.links[linkB] || h.net.links[linkC] {
		t.Fatalf("links after GC = %v, want only %s", h.net.links, linkA)
	}
	steps := h.events.list()
	if steps[0] != "agent gc" || slices.Contains(steps, "teardown "+linkA) {
		t.Fatalf("steps = %q, want the agent first and %s never torn down", steps, linkA)
	}
}

func TestGCEmptyListReleasesEverything(t *testing.T) {
	h := newHarness(t)
	link := api.HostIfName("a", "eth0")
	h.net.links[link] = true
	if err := h.plugin.gc(t.Context(), h.cmdArgs(h.conf("1.1.0", `,"cni.dev/valid-attachments":[]`))); err != nil {
		t.Fatalf("gc() error = %v", err)
	}
	if len(h.agent.lastGC.Valid) != 0 || h.net.links[link] {
		t.Fatalf("valid = %v, links = %v; want nothing kept", h.agent.lastGC.Valid, h.net.links)
	}
}

// TestGCWithoutListReleasesEverything: libcni sends no list when GC is
// called without arguments (cnitool gc does), meaning nothing is valid.
func TestGCWithoutListReleasesEverything(t *testing.T) {
	h := newHarness(t)
	link := api.HostIfName("a", "eth0")
	h.net.links[link] = true
	if err := h.plugin.gc(t.Context(), h.cmdArgs(h.conf("1.1.0", ""))); err != nil {
		t.Fatalf("gc() error = %v", err)
	}
	if len(h.agent.lastGC.Valid) != 0 || h.net.links[link] {
		t.Fatalf("valid = %v, links = %v; want nothing kept", h.agent.lastGC.Valid, h.net.links)
	}
	if !strings.Contains(h.stderr.String(), "treating every attachment") {
		t.Fatalf("stderr = %q, want a note that nothing was listed", h.stderr.String())
	}
}

// TestGCKeepsInFlightLinks: the agent retains an ADD still in flight that
// the runtime does not list yet; its link must survive the sweep.
func TestGCKeepsInFlightLinks(t *testing.T) {
	h := newHarness(t)
	inFlight := api.HostIfName("starting", "eth0")
	h.net.links[inFlight] = true
	h.agent.gcResp = api.GCResponse{Retained: []string{inFlight}}
	if err := h.plugin.gc(t.Context(), h.cmdArgs(h.conf("1.1.0", `,"cni.dev/valid-attachments":[]`))); err != nil {
		t.Fatalf("gc() error = %v", err)
	}
	if !h.net.links[inFlight] {
		t.Fatal("GC swept the link of an ADD still in flight")
	}
}

func TestGCAgentFailureFailsGC(t *testing.T) {
	h := newHarness(t)
	h.net.links[api.HostIfName("x", "eth0")] = true
	h.agent.gcErr = api.Errorf(api.CodeInternal, "write state: disk full")
	err := h.plugin.gc(t.Context(), h.cmdArgs(h.conf("1.1.0", `,"cni.dev/valid-attachments":[]`)))
	wantCode(t, err, api.CodeInternal, "disk full")
	if got := h.events.list(); !slices.Equal(got, []string{"agent gc"}) {
		t.Fatalf("steps = %q: nothing may be swept when the agent did not answer", got)
	}
}

func TestGCKernelFailuresOnlyWarn(t *testing.T) {
	h := newHarness(t)
	stale := api.HostIfName("stale", "eth0")
	h.net.links[stale] = true
	h.net.teardownErr[stale] = errors.New("delete host interface: device busy")
	if err := h.plugin.gc(t.Context(), h.cmdArgs(h.conf("1.1.0", `,"cni.dev/valid-attachments":[]`))); err != nil {
		t.Fatalf("gc() error = %v, want success with a warning", err)
	}
	if !strings.Contains(h.stderr.String(), "device busy") {
		t.Fatalf("stderr = %q, want the teardown failure", h.stderr.String())
	}

	h.net.listErr = errors.New("netlink dump failed")
	if err := h.plugin.gc(t.Context(), h.cmdArgs(h.conf("1.1.0", `,"cni.dev/valid-attachments":[]`))); err != nil {
		t.Fatalf("gc() error = %v, want success with a warning", err)
	}
	if !strings.Contains(h.stderr.String(), "skip sweeping host links") {
		t.Fatalf("stderr = %q, want the listing failure", h.stderr.String())
	}
}
