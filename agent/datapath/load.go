//go:build linux

package datapath

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"lockstep.dev/lockstep/agent/policy"
	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/internal/bpffs"
)

// DefaultPinRoot is where the agent pins the dataplane's maps.
const DefaultPinRoot = "/sys/fs/bpf/lockstep"

// DefaultMasqueradeMark is kube-proxy's masquerade mark by default: bit 14
// (its --iptables-masquerade-bit).
const DefaultMasqueradeMark = 1 << 14

// Errors callers can test for with errors.Is.
var (
	// ErrNotAttached: Apply got an endpoint whose interface was not passed
	// to Attach first. Attach every endpoint before applying its policy.
	ErrNotAttached = errors.New("endpoint not attached")
	// ErrClosed is returned by Apply after Close.
	ErrClosed = errors.New("datapath closed")
	// ErrTooManyRanges: a rule carries more than policy.MaxPortRanges port
	// ranges; the policy compiler fails such a rule's direction closed
	// before it gets here.
	ErrTooManyRanges = errors.New("too many port ranges")
)

// btfCarriers are maps in the object only to carry BTF types (see
// bpf/lib/maps.h); they are never created.
var btfCarriers = []string{"policy_inner_btf", "event_btf"}

// rejectScratchMap is the per-CPU buffer the programs build refusals in
// (bpf/lib/reject.h): created with them, not pinned.
const rejectScratchMap = "lockstep_reject_scratch"

// Options configure Load.
type Options struct {
	// PinRoot is the directory the maps are pinned in (DefaultPinRoot when
	// empty). When neither it nor its parent is on a bpffs, one is mounted
	// at its parent (see internal/bpffs).
	PinRoot string
	// Logger receives progress and repairs; nil discards.
	Logger *slog.Logger
	// LeaveServicesToKubeProxy makes Apply translate no Service: it
	// ignores policy.Desired.Services and removes the frontends a previous
	// agent left in the bpfmaps. Pods' packets to a ClusterIP then go on
	// untranslated, for kube-proxy to translate in the node's netfilter,
	// and egress policy judges them on the ClusterIP (a world address),
	// not on the backend. Connections translated before keep their
	// backend until they end.
	LeaveServicesToKubeProxy bool
	// MasqueradeMark is ORed into the mark of the packets of a pod's
	// connection translated to an external frontend
	// (policy.ServiceEntry.External) and a backend on another node (not
	// policy.ServiceBackend.Local): kube-proxy's masquerade mark (1 <<
	// its --iptables-masquerade-bit), for its POSTROUTING rule to
	// masquerade the connection as it masquerades its own translations of
	// that frontend. 0 means kube-proxy's default, 0x4000.
	MasqueradeMark uint32
}

// Datapath is the loaded dataplane of a node. Its methods are safe for
// concurrent use.
type Datapath struct {
	pinRoot string
	log     *slog.Logger
	// leaveServices is Options.LeaveServicesToKubeProxy.
	leaveServices bool
	// masqMark is Options.MasqueradeMark, defaulted.
	masqMark uint32

	fromPod, toPod *ebpf.Program
	fromUplink     *ebpf.Program
	uplinks        *ebpf.Map
	// uplinkMu serialises SetUplinks.
	uplinkMu    sync.Mutex
	state       *ebpf.Map
	endpoints   *ebpf.Map
	policy      *ebpf.Map
	ipcache     *ebpf.Map
	cidrs       *ebpf.Map
	services    *ebpf.Map
	backends    *ebpf.Map
	ct          *ebpf.Map
	svcCT       *ebpf.Map
	ctEpoch     *ebpf.Map
	ctShare     *ebpf.Map
	ctReleased  *ebpf.Map
	ctInserts   *ebpf.Map // with ctEvictions: the conntrack tables' evictions (ctevict.go)
	ctEvictions *ebpf.Map
	counters    *ebpf.Map
	ruleAllowed *ebpf.Map // with denied: the per-policy verdict counts (verdictcount.go)
	denied      *ebpf.Map
	events      *ebpf.Map
	innerSpec   *ebpf.MapSpec
	// rules names the rule ids the policy map values carry.
	rules ruleTable
	// verdicts turns the counts of ruleAllowed and denied into counts by
	// policy (verdictcount.go).
	verdicts verdictTotals
	// verdictBatchFallbacks counts the scrapes that read the rule ids
	// one at a time because a batch read failed (under mu).
	verdictBatchFallbacks int
	// unnamedLogged: the ids ran out once and it was logged; unnamedLive:
	// some rule in force has id 0 for lack of ids (RuleIDsExhausted).
	unnamedLogged bool
	unnamedLive   atomic.Bool

	mu       sync.Mutex
	attached map[string]int // host veth name → ifindex
	// ifNames is attached by ifindex, as published last (HostInterface).
	ifNames atomic.Pointer[map[uint32]string]
	// isolators is, by ifindex, the policies that isolate each
	// endpoint by direction in the live parity, as published at the last
	// flip (Isolators).
	isolators atomic.Pointer[map[uint32][2][]string]
	mirror    mirror     // what the maps hold, for incremental Apply
	stats     applyStats // what the last Apply wrote
	// svcStats counts the Service map writes: &stats, or the settler's
	// own count while it settles.
	svcStats *applyStats
	// svcChecked is what checkServices concluded about each Service
	// frontend of svcCheckedFor, svcTotals the sums of those lockstep
	// translates; svcDeltas are the last changes of Desired.Services
	// the compiler described (Desired.ServicesBase), newest last.
	svcChecked    map[policy.ServiceFrontend]svcCheck
	svcCheckedFor map[policy.ServiceFrontend]*policy.ServiceEntry
	svcTotals     svcTotals
	svcDeltas     []svcDelta
	settler       settler // brings the idle parity up to date after a flip
	// readBack makes the next Apply read the maps back into the mirror
	// first (Invalidate).
	readBack bool
	// ctGone are the ifindexes of removed endpoints whose conntrack
	// entries the settler deletes next (see ctflush.go).
	ctGone map[uint32]struct{}
	// ctMu serialises the walks of the conntrack tables that delete
	// entries and write share slots: the flush of removed endpoints and
	// the reclaimer (ctshare.go).
	ctMu sync.Mutex
	// ctRaced counts the expired entries the reclaimer took out that a
	// packet had made live again (takeExpired), since Load.
	ctRaced atomic.Uint64
	// reclaimStop ends the reclaimer, which closes reclaimDone.
	reclaimStop, reclaimDone chan struct{}

	// beforeFlip, when set (tests), runs after the idle parity is
	// written and before gen flips.
	beforeFlip func()
}

// Load loads the dataplane object, reusing the maps pinned under the pin
// root when they are compatible (so the previous agent's state keeps being
// enforced and is adopted by the next Apply) and replacing those that are
// not.
func Load(opts Options) (*Datapath, error) {
	if opts.PinRoot == "" {
		opts.PinRoot = DefaultPinRoot
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	mountedAt, err := bpffs.EnsureRoot(opts.PinRoot)
	if err != nil {
		return nil, err
	}
	if mountedAt != "" {
		opts.Logger.Info("mounted a bpffs: none was mounted for the pin root", "at", mountedAt, "pin_root", opts.PinRoot)
	}
	spec, err := loadEndpoint()
	if err != nil {
		return nil, fmt.Errorf("load BPF object spec: %w", err)
	}
	for _, name := range btfCarriers {
		delete(spec.Maps, name)
	}
	dropped := false
	for name, ms := range spec.Maps {
		if ms.Pinning == ebpf.PinByName {
			gone, err := dropIncompatiblePin(opts.PinRoot, ms, opts.Logger)
			if err != nil {
				return nil, fmt.Errorf("check pinned map %s: %w", name, err)
			}
			dropped = dropped || (gone && slices.Contains(bpfmaps.CTTableMaps[:], name))
		}
	}
	if dropped {
		// The counts of a conntrack table's evictions describe the
		// table they were made with: a new table starts them anew.
		for _, name := range []string{bpfmaps.CTInsertedMap, bpfmaps.CTEvictionsMap} {
			if err := os.Remove(filepath.Join(opts.PinRoot, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("remove %s with its conntrack table: %w", name, err)
			}
		}
	}
	coll, err := ebpf.NewCollectionWithOptions(spec, ebpf.CollectionOptions{
		Maps: ebpf.MapOptions{PinPath: opts.PinRoot},
	})
	if err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			return nil, fmt.Errorf("load BPF programs: %w\n%+v", err, verr)
		}
		return nil, fmt.Errorf("load BPF programs: %w", err)
	}
	d := &Datapath{
		pinRoot:       opts.PinRoot,
		log:           opts.Logger,
		leaveServices: opts.LeaveServicesToKubeProxy,
		masqMark:      cmp.Or(opts.MasqueradeMark, DefaultMasqueradeMark),
		fromPod:       coll.Programs["from_pod"],
		toPod:         coll.Programs["to_pod"],
		fromUplink:    coll.Programs["from_uplink"],
		uplinks:       coll.Maps[bpfmaps.UplinksMap],
		state:         coll.Maps[bpfmaps.StateMap],
		endpoints:     coll.Maps[bpfmaps.EndpointsMap],
		policy:        coll.Maps[bpfmaps.PolicyMap],
		ipcache:       coll.Maps[bpfmaps.IPCacheMap],
		cidrs:         coll.Maps[bpfmaps.CIDRsMap],
		services:      coll.Maps[bpfmaps.ServicesMap],
		backends:      coll.Maps[bpfmaps.BackendsMap],
		ct:            coll.Maps[bpfmaps.CTMap],
		svcCT:         coll.Maps[bpfmaps.SvcCTMap],
		ctEpoch:       coll.Maps[bpfmaps.CTEpochMap],
		ctShare:       coll.Maps[bpfmaps.CTShareMap],
		ctReleased:    coll.Maps[bpfmaps.CTReleasedMap],
		ctInserts:     coll.Maps[bpfmaps.CTInsertedMap],
		ctEvictions:   coll.Maps[bpfmaps.CTEvictionsMap],
		counters:      coll.Maps[bpfmaps.CountersMap],
		ruleAllowed:   coll.Maps[bpfmaps.RuleAllowedMap],
		denied:        coll.Maps[bpfmaps.DeniedMap],
		events:        coll.Maps[bpfmaps.EventsMap],
		innerSpec:     spec.Maps[bpfmaps.PolicyMap].InnerMap.Copy(),
		attached:      make(map[string]int),
	}
	d.svcStats = &d.stats
	// No reader of this agent listens yet: a flag a previous agent (or a
	// monitor) left set when it died would keep the programs emitting
	// for no one. The agent's monitor streams set it again when the
	// first subscriber comes.
	if err := coll.Maps[bpfmaps.MonitorMap].Put(uint32(0), uint32(0)); err != nil {
		opts.Logger.Warn("clear the verdict event flag; events may be emitted with no reader until a monitor comes and goes", "map", bpfmaps.MonitorMap, "err", err)
	}
	// The programs hold the maps Go does not keep open: the monitor flag
	// (cleared above; the event hub opens its pin), the flow cache, the
	// affinity entries, the refusals' scratch buffer and the routed SYN.
	for _, name := range []string{bpfmaps.MonitorMap, bpfmaps.CTCacheMap, bpfmaps.AffinityMap, rejectScratchMap, bpfmaps.RoutedSYNMap} {
		coll.Maps[name].Close()
	}
	if err := d.probeInnerCompat(); err != nil {
		d.closeObjects()
		// The pinned outer map was made for another inner map layout:
		// replace it and load again.
		opts.Logger.Warn("replacing pinned policy map with incompatible inner maps", "err", err)
		if rerr := os.Remove(filepath.Join(opts.PinRoot, bpfmaps.PolicyMap)); rerr != nil {
			return nil, fmt.Errorf("remove incompatible %s: %w", bpfmaps.PolicyMap, rerr)
		}
		return Load(opts)
	}
	if err := d.adopt(); err != nil {
		d.closeObjects()
		return nil, fmt.Errorf("adopt pinned state: %w", err)
	}
	if err := d.startSettler(); err != nil {
		d.mirror.closeInners()
		d.closeObjects()
		return nil, err
	}
	d.startReclaimer()
	return d, nil
}

// dropIncompatiblePin removes the pin of ms when the map pinned there
// cannot be reused, so the collection creates and pins a fresh one, and
// reports whether it did.
func dropIncompatiblePin(pinRoot string, ms *ebpf.MapSpec, log *slog.Logger) (bool, error) {
	path := filepath.Join(pinRoot, ms.Name)
	m, err := ebpf.LoadPinnedMap(path, nil)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	cerr := ms.Compatible(m)
	if cerr == nil && ms.InnerMap != nil {
		cerr = innerFits(m, ms.InnerMap)
	}
	m.Close()
	if cerr == nil {
		return false, nil
	}
	log.Warn("replacing incompatible pinned map", "map", ms.Name, "err", cerr)
	return true, os.Remove(path)
}

// innerFits checks that an inner map made from spec fits the pinned
// outer map m, at ifindex 0, which no device has. Before the programs
// load: the verifier checks them against the inner map template the
// pinned outer map was made with, so an outer map from an agent with
// another policy value layout fails the load rather than the probe after
// it.
func innerFits(m *ebpf.Map, spec *ebpf.MapSpec) error {
	inner, err := ebpf.NewMap(spec)
	if err != nil {
		return fmt.Errorf("create inner policy map: %w", err)
	}
	defer inner.Close()
	key := bpfmaps.PolicyOuterKey{Ifindex: 0, Parity: 0}
	if err := m.Put(key, uint32(inner.FD())); err != nil {
		return fmt.Errorf("inner maps of this agent do not fit: %w", err)
	}
	return m.Delete(key)
}

// probeInnerCompat checks that inner maps made from this object's template
// fit the (possibly reused) outer policy map, using ifindex 0, which no
// device has.
func (d *Datapath) probeInnerCompat() error {
	inner, err := ebpf.NewMap(d.innerSpec)
	if err != nil {
		return fmt.Errorf("create inner policy map: %w", err)
	}
	defer inner.Close()
	key := bpfmaps.PolicyOuterKey{Ifindex: 0, Parity: 0}
	if err := d.policy.Put(key, uint32(inner.FD())); err != nil {
		return err
	}
	return d.policy.Delete(key)
}

// Close releases the programs and maps of d. Pinned maps and attached
// filters stay: they keep enforcing the last applied state until a new
// agent loads and adopts them, or Remove cleans up.
func (d *Datapath) Close() error {
	d.stopReclaimer()
	d.stopSettler()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mirror.closeInners()
	d.closeObjects()
	return nil
}

func (d *Datapath) closeObjects() {
	for _, c := range []interface{ Close() error }{d.fromPod, d.toPod, d.fromUplink, d.uplinks, d.state, d.endpoints, d.policy, d.ipcache, d.cidrs, d.services, d.backends, d.ct, d.svcCT, d.ctEpoch, d.ctShare, d.ctReleased, d.ctInserts, d.ctEvictions, d.counters, d.ruleAllowed, d.denied, d.events} {
		if c != nil {
			c.Close()
		}
	}
}

// Unpin removes the pins of d's maps (see Remove).
func (d *Datapath) Unpin() error { return Remove(d.pinRoot) }

// Remove detaches from_uplink from the node's uplinks (its links are
// pinned), deletes every map pinned under pinRoot and the directory
// itself if it is then empty. Filters still attached keep their programs and
// maps alive until they are detached: detach first for a full cleanup.
func Remove(pinRoot string) error {
	errs := []error{removeUplinks(pinRoot)}
	for _, name := range bpfmaps.Names {
		if err := os.Remove(filepath.Join(pinRoot, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("unpin %s: %w", name, err))
		}
	}
	if err := os.Remove(pinRoot); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) && !errors.Is(err, unix.EBUSY) {
		errs = append(errs, fmt.Errorf("remove pin root %s: %w", pinRoot, err))
	}
	return errors.Join(errs...)
}

// PinRoot returns the directory d's maps are pinned in.
func (d *Datapath) PinRoot() string { return d.pinRoot }

// check that the policy contract and the C side agree on the constants
// they share.
var _ = [1]struct{}{}[min(policy.MaxPortRanges, 1<<(16-bpfmaps.MinBucketShift))-policy.MaxPortRanges]
