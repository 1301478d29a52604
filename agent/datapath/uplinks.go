//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/bpfmaps"
)

// uplinkDir, under the pin root, holds from_uplink's tcx links, one per
// uplink, each named by its device's ifindex.
const uplinkDir = "uplinks"

// SetUplinks makes the devices named ifnames, in the current network
// namespace, the node's uplinks: from_uplink attached to each one's tc
// ingress and lockstep_uplinks listing exactly them, so that from_pod
// routes the packets of connections pods open to other nodes' pods past
// the node's stack (bpf/lib/route.h) when their route leaves through one
// of them. from_uplink is detached from every other device it was on. An
// empty list turns host routing off: every packet takes the node's stack.
//
// A device is attached before it is listed, and unlisted before it is
// detached, so a reply always finds from_uplink where from_pod sent its
// request. The links are pinned under the pin root: like the pods'
// filters they outlive the agent, and the next agent's SetUplinks adopts
// them (updated to its program). It is idempotent; a device it cannot
// attach to is reported and left out.
func (d *Datapath) SetUplinks(ifnames []string) error {
	d.uplinkMu.Lock()
	defer d.uplinkMu.Unlock()

	var errs []error
	want := make(map[uint32]string, len(ifnames))
	for _, name := range ifnames {
		l, err := netlink.LinkByName(name)
		if err != nil {
			errs = append(errs, fmt.Errorf("set uplinks: find %s: %w", name, err))
			continue
		}
		// The programs read and write Ethernet frames.
		if encap := l.Attrs().EncapType; encap != "ether" {
			errs = append(errs, fmt.Errorf("set uplinks: %s is a %s device, not Ethernet: host routing cannot use it", name, encap))
			continue
		}
		want[uint32(l.Attrs().Index)] = name
	}
	dir := filepath.Join(d.pinRoot, uplinkDir)
	if len(want) > 0 {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("set uplinks: %w", err)
		}
	}
	pinned, err := pinnedUplinks(dir)
	if err != nil {
		return fmt.Errorf("set uplinks: %w", err)
	}
	var listed []uint32
	var idx, one uint32
	it := d.uplinks.Iterate()
	for it.Next(&idx, &one) {
		listed = append(listed, idx)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("set uplinks: read %s: %w", bpfmaps.UplinksMap, err)
	}
	// Key 0 (host routing on) goes first, and comes back below once an
	// uplink is listed: no new connection is marked for routing while
	// none may be.
	slices.Sort(listed)
	for _, idx := range listed {
		if _, ok := want[idx]; !ok {
			if err := d.uplinks.Delete(idx); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				errs = append(errs, fmt.Errorf("set uplinks: unlist ifindex %d: %w", idx, err))
			}
		}
	}
	for idx, path := range pinned {
		if _, ok := want[idx]; ok {
			continue
		}
		// The pin is the link's last reference: removing it detaches.
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("set uplinks: detach from ifindex %d: %w", idx, err))
		}
	}
	on := false
	for idx, name := range want {
		if err := d.attachUplink(dir, idx, pinned[idx]); err != nil {
			errs = append(errs, fmt.Errorf("set uplinks: attach to %s: %w", name, err))
			continue
		}
		if err := d.uplinks.Put(idx, uint32(1)); err != nil {
			errs = append(errs, fmt.Errorf("set uplinks: list %s: %w", name, err))
			continue
		}
		on = true
	}
	if on {
		if err := d.uplinks.Put(uint32(0), uint32(1)); err != nil {
			errs = append(errs, fmt.Errorf("set uplinks: turn host routing on: %w", err))
		}
	}
	return errors.Join(errs...)
}

// attachUplink attaches from_uplink to the tc ingress of ifindex through
// a link pinned in dir, or updates the link pinned at path (a previous
// agent's) to this agent's program.
func (d *Datapath) attachUplink(dir string, ifindex uint32, path string) error {
	if path != "" {
		l, err := link.LoadPinnedLink(path, nil)
		if err == nil {
			err = l.Update(d.fromUplink)
			l.Close()
		}
		if err == nil {
			return nil
		}
		// A link whose device went away (and an ifindex that came back)
		// cannot be updated: attach anew.
		if rerr := os.Remove(path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			return fmt.Errorf("replace stale link: %w", rerr)
		}
	}
	l, err := link.AttachTCX(link.TCXOptions{Interface: int(ifindex), Program: d.fromUplink, Attach: ebpf.AttachTCXIngress})
	if err != nil {
		return err
	}
	defer l.Close()
	return l.Pin(filepath.Join(dir, strconv.FormatUint(uint64(ifindex), 10)))
}

// Uplinks returns the ifindexes of the devices lockstep_uplinks lists,
// sorted.
func (d *Datapath) Uplinks() ([]uint32, error) {
	var out []uint32
	var idx, one uint32
	it := d.uplinks.Iterate()
	for it.Next(&idx, &one) {
		if idx != 0 {
			out = append(out, idx)
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", bpfmaps.UplinksMap, err)
	}
	slices.Sort(out)
	return out, nil
}

// pinnedUplinks lists the links pinned in dir by ifindex; files that are
// not named by an ifindex are not lockstep's and are left alone.
func pinnedUplinks(dir string) (map[uint32]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make(map[uint32]string, len(entries))
	for _, e := range entries {
		idx, err := strconv.ParseUint(e.Name(), 10, 32)
		if err != nil || idx == 0 {
			continue
		}
		out[uint32(idx)] = filepath.Join(dir, e.Name())
	}
	return out, nil
}

// removeUplinks detaches from_uplink everywhere by removing its pinned
// links under pinRoot, and their directory.
func removeUplinks(pinRoot string) error {
	dir := filepath.Join(pinRoot, uplinkDir)
	pinned, err := pinnedUplinks(dir)
	if err != nil {
		return fmt.Errorf("list uplink links: %w", err)
	}
	var errs []error
	for idx, path := range pinned {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, fmt.Errorf("detach from ifindex %d: %w", idx, err))
		}
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ENOTEMPTY) {
		errs = append(errs, fmt.Errorf("remove %s: %w", dir, err))
	}
	return errors.Join(errs...)
}

// DefaultUplinks names the devices of the current network namespace that
// can carry the node's traffic to other nodes: Ethernet devices that are
// up, not a pod's host veth, with a global unicast address. Host routing
// sends pods' packets out of these only when the node's own route says
// so. Layer-3 devices (WireGuard, tunnels) are not among them: the
// programs read Ethernet frames.
func DefaultUplinks() ([]string, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("list links: %w", err)
	}
	var out []string
	for _, l := range links {
		a := l.Attrs()
		if a.Flags&net.FlagUp == 0 || a.EncapType != "ether" || api.IsHostIfName(a.Name) {
			continue
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return nil, fmt.Errorf("list addresses of %s: %w", a.Name, err)
		}
		if slices.ContainsFunc(addrs, func(a netlink.Addr) bool { return a.IP.IsGlobalUnicast() }) {
			out = append(out, a.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}
