package agent

import (
	"bytes"
	"io"
	"log/slog"
	"maps"
	"runtime"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/datapath"
	"lockstep.dev/lockstep/agent/enforcer"
	"lockstep.dev/lockstep/agent/hns"
	"lockstep.dev/lockstep/agent/iptables"
	"lockstep.dev/lockstep/agent/policy"
)

// countingDataplane is a Counter and a MetricsWriter.
type countingDataplane struct{ nopDataplane }

func (countingDataplane) Counts() map[string]int { return map[string]int{"rules": 7} }
func (countingDataplane) WriteMetrics(w io.Writer) {
	io.WriteString(w, "fake_rules 7\n")
}

// closingDataplane is an io.Closer that counts its closes.
type closingDataplane struct {
	nopDataplane
	closes *atomic.Int32
}

func (d closingDataplane) Close() error { d.closes.Add(1); return nil }

// fakeCompactor is a Compactor that counts its compactions.
type fakeCompactor struct {
	due   bool
	err   error
	calls *atomic.Int32
}

func (c *fakeCompactor) CompactDue() bool { return c.due }
func (c *fakeCompactor) Compact() error   { c.calls.Add(1); return c.err }

// compactingDataplane is a Compactor, always due.
type compactingDataplane struct {
	nopDataplane
	*fakeCompactor
}

// TestBackendOptionalInterfaces: the agent asks a backend for sizes,
// samples, compaction and a close only through the interface the backend
// implements: one without a Compactor is never compacted (and registers
// no compaction loop), one without a Counter reports no counts, one that
// is no io.Closer is not closed.
func TestBackendOptionalInterfaces(t *testing.T) {
	for _, tc := range []struct {
		name        string
		dp          func(closes, compactions *atomic.Int32) enforcer.Dataplane
		wantCounts  map[string]int
		wantMetrics string
		wantCompact bool
		wantCloses  int32
	}{
		{"plain: nothing", func(_, _ *atomic.Int32) enforcer.Dataplane { return nopDataplane{} }, nil, "", false, 0},
		{"counter and metrics writer", func(_, _ *atomic.Int32) enforcer.Dataplane { return countingDataplane{} },
			map[string]int{"rules": 7}, "fake_rules 7\n", false, 0},
		{"closer", func(closes, _ *atomic.Int32) enforcer.Dataplane { return closingDataplane{closes: closes} }, nil, "", false, 1},
		{"compactor", func(_, compactions *atomic.Int32) enforcer.Dataplane {
			return compactingDataplane{fakeCompactor: &fakeCompactor{due: true, calls: compactions}}
		}, nil, "", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var closes, compactions atomic.Int32
			be := &backend{name: "fake", dp: tc.dp(&closes, &compactions)}
			if got := be.counts(); !maps.Equal(got, tc.wantCounts) || (got == nil) != (tc.wantCounts == nil) {
				t.Errorf("counts() = %v, want %v", got, tc.wantCounts)
			}
			var buf bytes.Buffer
			be.writeMetrics(&buf)
			if buf.String() != tc.wantMetrics {
				t.Errorf("writeMetrics wrote %q, want %q", buf.String(), tc.wantMetrics)
			}

			ops, err := startOps(Config{}, newAPIGate(), nil, nil, slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			if started := be.startCompaction(t.Context(), ops, slog.New(slog.DiscardHandler)); started != tc.wantCompact {
				t.Errorf("startCompaction() = %v, want %v", started, tc.wantCompact)
			}
			var loops []string
			for _, l := range ops.watchdog.Loops() {
				loops = append(loops, l.Name)
			}
			if got := slices.Contains(loops, "compaction"); got != tc.wantCompact {
				t.Errorf("compaction loop registered: %v, want %v (loops %q)", got, tc.wantCompact, loops)
			}
			if tc.wantCompact { // the loop checks every second: wait for its first turn
				for deadline := time.Now().Add(10 * time.Second); compactions.Load() == 0 && time.Now().Before(deadline); {
					time.Sleep(10 * time.Millisecond)
				}
			}
			if got := compactions.Load() > 0; got != tc.wantCompact {
				t.Errorf("compacted: %v, want %v", got, tc.wantCompact)
			}

			if err := be.close(); err != nil {
				t.Fatal(err)
			}
			if got := closes.Load(); got != tc.wantCloses {
				t.Errorf("%d closes, want %d", got, tc.wantCloses)
			}
		})
	}
}

// TestBackendsImplement: each real backend implements the optional
// interfaces its abilities call for, and the eBPF adapter hides none of
// the datapath's own (the enforcer finds Invalidator and AttachChecker
// through it as it did on the datapath).
func TestBackendsImplement(t *testing.T) {
	type has struct{ counter, metrics, compactor, closer, invalidator, attachChecker bool }
	of := func(dp enforcer.Dataplane) has {
		_, counter := dp.(Counter)
		_, metrics := dp.(MetricsWriter)
		_, compactor := dp.(Compactor)
		_, closer := dp.(io.Closer)
		_, inv := dp.(enforcer.Invalidator)
		_, ac := dp.(enforcer.AttachChecker)
		return has{counter, metrics, compactor, closer, inv, ac}
	}
	datapathHas := of(&datapath.Datapath{})
	for _, tc := range []struct {
		name string
		dp   enforcer.Dataplane
		want has
	}{
		{"ebpf", ebpfDataplane{}, has{counter: true, metrics: true, closer: true,
			invalidator: datapathHas.invalidator, attachChecker: datapathHas.attachChecker}},
		{"iptables", &iptables.Dataplane{}, has{counter: true, metrics: true, compactor: true, invalidator: true}},
		{"hns", &hns.Dataplane{}, has{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := of(tc.dp); got != tc.want {
				t.Errorf("implements %+v, want %+v", got, tc.want)
			}
		})
	}
	if runtime.GOOS == "linux" && (!datapathHas.invalidator || !datapathHas.attachChecker) {
		t.Errorf("the datapath implements %+v: the eBPF row checks less than it should", datapathHas)
	}
}

// TestBackendLimits: only the eBPF dataplane translating Services bounds
// them by its maps' capacities; every backend keeps the policy limits.
func TestBackendLimits(t *testing.T) {
	for _, tc := range []struct {
		be       backend
		bounded  bool
		describe string
	}{
		{backend{name: backendEBPF}, true, "eBPF, translating"},
		{backend{name: backendEBPF, servicesLeft: true}, false, "eBPF, kube-proxy translating"},
		{backend{name: "iptables-nft"}, false, "iptables, translating with netfilter"},
		{backend{name: "iptables-nft", servicesLeft: true}, false, "iptables, kube-proxy translating"},
		{backend{name: DataplaneHNS}, false, "HNS"},
	} {
		l := tc.be.limits()
		if bounded := l.ServiceFrontends > 0 && l.ServiceBackends > 0; bounded != tc.bounded {
			t.Errorf("%s: Service limits %d frontends, %d backends, want bounded %v", tc.describe, l.ServiceFrontends, l.ServiceBackends, tc.bounded)
		}
		if l.Prefixes != policy.DefaultLimits.Prefixes || l.RulesPerNamespace != policy.DefaultLimits.RulesPerNamespace || l.PrefixesPerNamespace != policy.DefaultLimits.PrefixesPerNamespace {
			t.Errorf("%s: policy limits %+v, want the defaults", tc.describe, l)
		}
	}
}
