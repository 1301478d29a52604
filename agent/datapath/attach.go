//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Filter identity on the clsact hooks: one filter per hook, at a fixed
// priority and handle, so Attach can replace a stale one in place.
const (
	filterPriority = 1
	filterHandle   = 1
)

// Attach attaches from_pod and to_pod to the host-side veth ifname in the
// current network namespace, replacing filters a previous agent left there,
// and records its ifindex for Apply. It is idempotent. Until Apply gives
// the endpoint a policy, its traffic is dropped (fail closed), except ARP
// and IPv6 neighbour discovery.
func (d *Datapath) Attach(ifname string) error {
	link, err := netlink.LinkByName(ifname)
	if err != nil {
		return fmt.Errorf("attach to %s: find link: %w", ifname, err)
	}
	idx := link.Attrs().Index
	qdisc := &netlink.GenericQdisc{
		QdiscAttrs: netlink.QdiscAttrs{
			LinkIndex: idx,
			Handle:    netlink.MakeHandle(0xffff, 0),
			Parent:    netlink.HANDLE_CLSACT,
		},
		QdiscType: "clsact",
	}
	if err := netlink.QdiscAdd(qdisc); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("attach to %s: add clsact qdisc: %w", ifname, err)
	}
	for _, f := range []struct {
		parent uint32
		name   string
		fd     int
	}{
		{netlink.HANDLE_MIN_INGRESS, "lockstep_from_pod", d.fromPod.FD()},
		{netlink.HANDLE_MIN_EGRESS, "lockstep_to_pod", d.toPod.FD()},
	} {
		filter := &netlink.BpfFilter{
			FilterAttrs: netlink.FilterAttrs{
				LinkIndex: idx,
				Parent:    f.parent,
				Handle:    filterHandle,
				Priority:  filterPriority,
				Protocol:  unix.ETH_P_ALL,
			},
			Fd:           f.fd,
			Name:         f.name,
			DirectAction: true,
		}
		if err := netlink.FilterReplace(filter); err != nil {
			return fmt.Errorf("attach to %s: add %s filter: %w", ifname, f.name, err)
		}
	}
	d.mu.Lock()
	d.recordAttach(ifname, idx)
	d.mu.Unlock()
	return nil
}

// recordAttach records that ifname is attached at ifindex idx. Called
// with d.mu held.
func (d *Datapath) recordAttach(ifname string, idx int) {
	if old, ok := d.attached[ifname]; ok && old != idx {
		// Another ADD made the link anew under the same name, without a
		// Detach in between: the old ifindex names nothing now.
		d.publishInterface(ifname, old, false)
	}
	d.attached[ifname] = idx
	delete(d.ctGone, uint32(idx))
	d.publishInterface(ifname, idx, true)
}

// publishInterface records that ifname was attached at ifindex idx (up)
// or detached, and publishes the interfaces by ifindex for HostInterface,
// which a monitor calls for every event without taking d.mu (an Apply
// holds it). The last interface attached at an ifindex names it: one that
// vanished without a Detach and whose ifindex the kernel gave a new pod
// never names that pod's events. Called with d.mu held.
func (d *Datapath) publishInterface(ifname string, idx int, up bool) {
	prev := d.ifNames.Load()
	byIndex := make(map[uint32]string, len(d.attached))
	if prev != nil {
		for i, name := range *prev {
			byIndex[i] = name
		}
	}
	switch {
	case up:
		byIndex[uint32(idx)] = ifname
	case byIndex[uint32(idx)] == ifname:
		delete(byIndex, uint32(idx))
	}
	d.ifNames.Store(&byIndex)
}

// HostInterface returns the name of the host interface d attached to at
// ifindex (a verdict event's bpfmaps.Event.Ifindex), false when it has
// none there: without asking the kernel, which would list every link.
func (d *Datapath) HostInterface(ifindex uint32) (string, bool) {
	m := d.ifNames.Load()
	if m == nil {
		return "", false
	}
	name, ok := (*m)[ifindex]
	return name, ok
}

// publishIsolators publishes, for Isolators, which policies isolate each
// endpoint of the live parity. Called with d.mu held, after a flip.
func (d *Datapath) publishIsolators() {
	live := int(d.mirror.gen & 1)
	byIndex := make(map[uint32][2][]string, len(d.mirror.eps))
	for idx, e := range d.mirror.eps {
		if src := e.src[live]; src != nil {
			byIndex[idx] = src.Isolators
		}
	}
	d.isolators.Store(&byIndex)
}

// Isolators returns the policies (namespace/name) that isolate the
// endpoint at ifindex in direction dir (0 ingress, 1 egress, as events number it)
// in the state applied last: those whose selection makes a packet no rule
// allows a default-deny drop. Like HostInterface it takes no lock.
func (d *Datapath) Isolators(ifindex uint32, dir uint8) []string {
	m := d.isolators.Load()
	if m == nil || dir > 1 {
		return nil
	}
	return (*m)[ifindex][dir]
}

// Attached reports whether ifname in the current network namespace still
// has both of d's filters: from_pod on its ingress hook and to_pod on its
// egress hook, at Attach's priority and handle, running d's programs.
// Someone with CAP_NET_ADMIN can remove them (`tc filter del`, deleting
// the clsact qdisc) or replace them, and the endpoint is then not
// enforced; the agent's periodic resync asks, and attaches again what is
// missing. It implements enforcer.AttachChecker.
func (d *Datapath) Attached(ifname string) (bool, error) {
	link, err := netlink.LinkByName(ifname)
	if err != nil {
		return false, fmt.Errorf("check filters of %s: find link: %w", ifname, err)
	}
	for _, f := range []struct {
		parent uint32
		prog   *ebpf.Program
	}{
		{netlink.HANDLE_MIN_INGRESS, d.fromPod},
		{netlink.HANDLE_MIN_EGRESS, d.toPod},
	} {
		info, err := f.prog.Info()
		if err != nil {
			return false, fmt.Errorf("check filters of %s: read program info: %w", ifname, err)
		}
		id, _ := info.ID()
		filters, err := netlink.FilterList(link, f.parent)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return false, nil // no clsact qdisc
		}
		if err != nil {
			return false, fmt.Errorf("check filters of %s: list filters: %w", ifname, err)
		}
		if !slices.ContainsFunc(filters, func(nf netlink.Filter) bool {
			bf, ok := nf.(*netlink.BpfFilter)
			return ok && bf.Handle == filterHandle && bf.Priority == filterPriority && bf.Id == int(id)
		}) {
			return false, nil
		}
	}
	return true, nil
}

// Detach removes lockstep's filters from ifname in the current network
// namespace. It is idempotent: a missing link or filter is not an error.
// The endpoint's map entries go with the next Apply that lacks it.
func (d *Datapath) Detach(ifname string) error {
	d.mu.Lock()
	if idx, ok := d.attached[ifname]; ok {
		delete(d.attached, ifname)
		d.publishInterface(ifname, idx, false)
	}
	d.mu.Unlock()
	link, err := netlink.LinkByName(ifname)
	if err != nil {
		var notFound netlink.LinkNotFoundError
		if errors.As(err, &notFound) {
			return nil
		}
		return fmt.Errorf("detach from %s: find link: %w", ifname, err)
	}
	for _, parent := range []uint32{netlink.HANDLE_MIN_INGRESS, netlink.HANDLE_MIN_EGRESS} {
		filter := &netlink.BpfFilter{
			FilterAttrs: netlink.FilterAttrs{
				LinkIndex: link.Attrs().Index,
				Parent:    parent,
				Handle:    filterHandle,
				Priority:  filterPriority,
				Protocol:  unix.ETH_P_ALL,
			},
		}
		if err := netlink.FilterDel(filter); err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("detach from %s: delete filter: %w", ifname, err)
		}
	}
	return nil
}
