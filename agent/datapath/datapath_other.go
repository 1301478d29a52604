//go:build !linux

package datapath

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"

	"lockstep.dev/lockstep/agent/policy"
	"lockstep.dev/lockstep/bpfmaps"
)

// DefaultPinRoot is where Load pins the maps on Linux.
const DefaultPinRoot = "/sys/fs/bpf/lockstep"

// Options configure Load.
type Options struct {
	// PinRoot is the directory the maps are pinned in.
	PinRoot string
	// Logger receives progress and repairs; nil discards.
	Logger *slog.Logger
	// LeaveServicesToKubeProxy makes Apply translate no Service.
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

// Datapath is the eBPF dataplane, which needs Linux (tc, bpffs): on other
// systems Load fails and there is never a Datapath to call.
type Datapath struct{}

// errUnsupported says what failed, on which system, and wraps
// errors.ErrUnsupported.
func errUnsupported(what string) error {
	return fmt.Errorf("%s: the eBPF dataplane needs linux, not %s (use --dataplane hns on windows): %w",
		what, runtime.GOOS, errors.ErrUnsupported)
}

// Load fails with an error wrapping errors.ErrUnsupported.
func Load(Options) (*Datapath, error) { return nil, errUnsupported("load eBPF dataplane") }

// Attach fails with an error wrapping errors.ErrUnsupported.
func (d *Datapath) Attach(ifname string) error { return errUnsupported("attach to " + ifname) }

// Attached fails with an error wrapping errors.ErrUnsupported.
func (d *Datapath) Attached(ifname string) (bool, error) {
	return false, errUnsupported("check filters of " + ifname)
}

// Detach fails with an error wrapping errors.ErrUnsupported.
func (d *Datapath) Detach(ifname string) error { return errUnsupported("detach from " + ifname) }

// Apply fails with an error wrapping errors.ErrUnsupported.
func (d *Datapath) Apply(*policy.Desired) error { return errUnsupported("apply eBPF dataplane state") }

// Counters fails with an error wrapping errors.ErrUnsupported.
func (d *Datapath) Counters() (map[string]bpfmaps.Counter, error) {
	return nil, errUnsupported("read eBPF counters")
}

// PolicyVerdicts fails with an error wrapping errors.ErrUnsupported.
func (d *Datapath) PolicyVerdicts() ([]PolicyVerdict, error) {
	return nil, errUnsupported("read eBPF policy verdict counts")
}

// ConntrackShares fails with an error wrapping errors.ErrUnsupported.
func (d *Datapath) ConntrackShares() (map[string]ConntrackShare, error) {
	return nil, errUnsupported("read eBPF conntrack shares")
}

// ConntrackHeld fails with an error wrapping errors.ErrUnsupported.
func (d *Datapath) ConntrackHeld() (uint64, error) {
	return 0, errUnsupported("read eBPF conntrack estimate")
}

// ConntrackEvictions fails with an error wrapping errors.ErrUnsupported.
func (d *Datapath) ConntrackEvictions() (map[string]uint64, error) {
	return nil, errUnsupported("read eBPF conntrack evictions")
}

// ConntrackReclaimRaces returns 0: there is no reclaimer.
func (d *Datapath) ConntrackReclaimRaces() uint64 { return 0 }

// Stats fails with an error wrapping errors.ErrUnsupported.
func (d *Datapath) Stats() (map[string]int, error) { return nil, errUnsupported("read eBPF map sizes") }

// Close does nothing.
func (d *Datapath) Close() error { return nil }

// Events reports that the eBPF dataplane is Linux-only.
func (d *Datapath) Events() (*bpfmaps.EventReader, error) {
	return nil, errUnsupported("read verdict events")
}

// RuleOrigin knows no rule: the eBPF dataplane is Linux-only.
func (d *Datapath) RuleOrigin(uint32) (policy.RuleOrigin, bool) { return policy.RuleOrigin{}, false }

// HostInterface knows no interface: the eBPF dataplane is Linux-only.
func (d *Datapath) HostInterface(uint32) (string, bool) { return "", false }

// Isolators knows no endpoint: the eBPF dataplane is Linux-only.
func (d *Datapath) Isolators(uint32, uint8) []string { return nil }

// RuleIDsExhausted returns false: the eBPF dataplane is Linux-only.
func (d *Datapath) RuleIDsExhausted() bool { return false }

// RuleIDsExhaustedTotal returns 0: the eBPF dataplane is Linux-only.
func (d *Datapath) RuleIDsExhaustedTotal() uint64 { return 0 }

// SetUplinks fails with an error wrapping errors.ErrUnsupported.
func (d *Datapath) SetUplinks([]string) error { return errUnsupported("set uplinks") }

// Uplinks fails with an error wrapping errors.ErrUnsupported.
func (d *Datapath) Uplinks() ([]uint32, error) { return nil, errUnsupported("read uplinks") }

// DefaultUplinks fails with an error wrapping errors.ErrUnsupported.
func DefaultUplinks() ([]string, error) { return nil, errUnsupported("find uplinks") }
