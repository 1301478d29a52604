//go:build linux

package iptables

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"lockstep.dev/lockstep/agent/datapath"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
)

// ebpfNode is the real eBPF dataplane of the semantics tests' node: a
// loaded datapath.Datapath whose maps are pinned on a private bpffs, with
// its programs attached to one veth per endpoint (semIfs) in a
// throwaway network namespace. Packets are run through the programs with
// BPF_PROG_TEST_RUN, naming the interface a program runs on in the
// context, as tc would.
type ebpfNode struct {
	ns             ns.NetNS
	d              *datapath.Datapath
	fromPod, toPod *ebpf.Program
	ifindex        map[string]uint32
	// conntrack are the maps a fresh node starts without entries in:
	// connections, translated connections, affinity clients.
	conntrack []*ebpf.Map
	ctEpoch   *ebpf.Map
	services  *ebpf.Map
	affinity  *ebpf.Map
}

// tc actions the programs return.
const (
	actOK       = 0 // TC_ACT_OK
	actShot     = 2 // TC_ACT_SHOT
	actRedirect = 7 // TC_ACT_REDIRECT: hairpin, or a refusal, back to the pod
)

// worldIfindex is the ingress ifindex of a packet that arrived from
// another host: any value but 0 (the node's own packets) will do.
const worldIfindex = 999

// newEBPFNode loads the eBPF dataplane and attaches it to semIfs; all of
// it goes when tb ends, pass or fail.
func newEBPFNode(tb testing.TB) *ebpfNode {
	tb.Helper()
	e := &ebpfNode{ns: newNetns(tb), ifindex: map[string]uint32{}}
	dir := tb.TempDir()
	if err := unix.Mount("bpffs", dir, "bpf", 0, "mode=0700"); err != nil {
		tb.Fatalf("mount private bpffs on %s: %v", dir, err)
	}
	tb.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			tb.Errorf("unmount %s: %v", dir, err)
		}
	})
	root := filepath.Join(dir, "lockstep")
	d, err := datapath.Load(datapath.Options{PinRoot: root})
	if err != nil {
		tb.Fatalf("load the eBPF dataplane: %v", err)
	}
	e.d = d
	tb.Cleanup(func() {
		d.Close()
		if err := datapath.Remove(root); err != nil {
			tb.Errorf("remove pinned maps: %v", err)
		}
	})
	err = e.ns.Do(func(ns.NetNS) error {
		for _, name := range semIfs {
			veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: name + "p"}
			if err := netlink.LinkAdd(veth); err != nil {
				return fmt.Errorf("add veth %s: %w", name, err)
			}
			link, err := netlink.LinkByName(name)
			if err != nil {
				return err
			}
			if err := netlink.LinkSetUp(link); err != nil {
				return fmt.Errorf("set %s up: %w", name, err)
			}
			if err := d.Attach(name); err != nil {
				return err
			}
			e.ifindex[name] = uint32(link.Attrs().Index)
		}
		// The programs tc runs are the ones Attach gave it.
		link, err := netlink.LinkByName(semIfs[0])
		if err != nil {
			return err
		}
		for _, h := range []struct {
			parent uint32
			prog   **ebpf.Program
		}{{netlink.HANDLE_MIN_INGRESS, &e.fromPod}, {netlink.HANDLE_MIN_EGRESS, &e.toPod}} {
			filters, err := netlink.FilterList(link, h.parent)
			if err != nil {
				return fmt.Errorf("list filters of %s: %w", semIfs[0], err)
			}
			for _, f := range filters {
				if bf, ok := f.(*netlink.BpfFilter); ok && *h.prog == nil {
					if *h.prog, err = ebpf.NewProgramFromID(ebpf.ProgramID(bf.Id)); err != nil {
						return fmt.Errorf("open program %d: %w", bf.Id, err)
					}
				}
			}
			if *h.prog == nil {
				return fmt.Errorf("no BPF filter on %s", semIfs[0])
			}
		}
		return nil
	})
	for _, p := range []*ebpf.Program{e.fromPod, e.toPod} {
		if p != nil {
			tb.Cleanup(func() { p.Close() })
		}
	}
	if err != nil {
		tb.Fatalf("attach the eBPF dataplane: %v", err)
	}
	open := func(name string) *ebpf.Map {
		m, err := ebpf.LoadPinnedMap(filepath.Join(root, name), nil)
		if err != nil {
			tb.Fatalf("open pinned %s: %v", name, err)
		}
		tb.Cleanup(func() { m.Close() })
		return m
	}
	e.affinity = open(bpfmaps.AffinityMap)
	e.conntrack = []*ebpf.Map{open(bpfmaps.CTMap), open(bpfmaps.SvcCTMap), e.affinity}
	e.ctEpoch = open(bpfmaps.CTEpochMap)
	e.services = open(bpfmaps.ServicesMap)
	return e
}

// forget empties the connection tracking and affinity maps and bumps the
// epoch that every CPU's flow cache is valid in: the node forgets every
// connection, as a fresh one would have none.
func (e *ebpfNode) forget(tb testing.TB) {
	tb.Helper()
	for _, m := range e.conntrack {
		var keys [][]byte
		k := make([]byte, m.KeySize())
		var prev any
		for {
			err := m.NextKey(prev, k)
			if errors.Is(err, ebpf.ErrKeyNotExist) {
				break
			}
			if err != nil {
				tb.Fatalf("list %s: %v", m, err)
			}
			keys = append(keys, slices.Clone(k))
			prev = keys[len(keys)-1]
		}
		for _, k := range keys {
			if err := m.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				tb.Fatalf("delete from %s: %v", m, err)
			}
		}
	}
	var epoch uint32
	if err := e.ctEpoch.Lookup(uint32(0), &epoch); err != nil {
		tb.Fatalf("read the conntrack epoch: %v", err)
	}
	if err := e.ctEpoch.Update(uint32(0), epoch+1, ebpf.UpdateExist); err != nil {
		tb.Fatalf("bump the conntrack epoch: %v", err)
	}
}

// affinityOf returns the backend the programs recorded for client's
// connections to fr (sessionAffinity ClientIP), or an invalid AddrPort.
func (e *ebpfNode) affinityOf(fr netip.AddrPort, proto uint8, client netip.Addr) (netip.AddrPort, error) {
	var sv bpfmaps.SvcValue
	err := e.services.Lookup(bpfmaps.SvcKey{Addr: bpfmaps.AddrFrom(fr.Addr()), Port: fr.Port(), Proto: proto}, &sv)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return netip.AddrPort{}, nil
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("look up frontend %s: %w", fr, err)
	}
	var av bpfmaps.AffinityValue
	err = e.affinity.Lookup(bpfmaps.AffinityKey{ID: sv.ID, Client: bpfmaps.AddrFrom(client)}, &av)
	if errors.Is(err, ebpf.ErrKeyNotExist) {
		return netip.AddrPort{}, nil
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("look up affinity of %s to %s: %w", client, fr, err)
	}
	return netip.AddrPortFrom(av.Addr.Netip(), av.Port), nil
}

// skbContext is the head of struct __sk_buff up to ifindex, the context a
// test run takes: ifindex names the device the program runs on (a tc
// program's skb->ifindex, the endpoint it judges for), ingress_ifindex
// the one the packet arrived on (0: the node's own).
type skbContext struct {
	Len, PktType, Mark, QueueMapping, Protocol uint32
	VlanPresent, VlanTCI, VlanProto, Priority  uint32
	IngressIfindex, Ifindex                    uint32
}

// run runs prog on the frame raw as tc runs it on the interface ifname,
// and returns the action and the frame as the program left it.
func (e *ebpfNode) run(prog *ebpf.Program, raw []byte, ifname string, ingress uint32) (uint32, []byte, error) {
	idx, ok := e.ifindex[ifname]
	if !ok {
		return 0, nil, fmt.Errorf("run on %s: not an endpoint", ifname)
	}
	opts := &ebpf.RunOptions{
		Data:    raw,
		DataOut: make([]byte, len(raw)+512),
		Context: skbContext{IngressIfindex: ingress, Ifindex: idx},
	}
	var ret uint32
	var runErr error
	if err := e.ns.Do(func(ns.NetNS) error {
		ret, runErr = prog.Run(opts)
		return nil
	}); err != nil {
		return 0, nil, err
	}
	if runErr != nil {
		return 0, nil, fmt.Errorf("run %s on %s: %w", prog, ifname, runErr)
	}
	return ret, opts.DataOut, nil
}

// ebpfResult is what the programs did with a packet on its way through
// the node: the verdict (as refPaths names it), the packet as the last
// program left it (for a refusal: the answer), whether from_pod sent it
// straight back to its pod as a hairpin, and the interface it left by.
type ebpfResult struct {
	verdict string
	pkt     wirePacket
	hairpin bool
	out     string
}

// traverse runs raw, a packet at hook (FORWARD, INPUT, OUTPUT) that
// arrived by in and is routed to out, through the programs it meets:
// from_pod of in (not for the node's own packets), then to_pod of the
// interface it leaves by (route's, when from_pod translated its
// destination; none for a packet to the node).
func (e *ebpfNode) traverse(raw []byte, hook, in, out string, route func(netip.Addr) string) (ebpfResult, error) {
	w, err := parseWirePacket(raw)
	if err != nil {
		return ebpfResult{}, err
	}
	res := ebpfResult{verdict: "ACCEPT", pkt: w, out: out}
	if _, ok := e.ifindex[in]; ok && hook != "OUTPUT" {
		ret, o, err := e.run(e.fromPod, raw, in, e.ifindex[in])
		if err != nil {
			return res, err
		}
		got, err := parseWirePacket(o)
		if err != nil {
			return res, fmt.Errorf("from_pod's packet: %w", err)
		}
		res.pkt = got
		switch ret {
		case actShot:
			res.verdict = "DROP"
			return res, nil
		case actRedirect:
			res.out = in
			if kind := refusalKind(got); kind != "" {
				res.verdict = "REJECT " + kind
			} else {
				res.hairpin = true
			}
			return res, nil
		case actOK:
		default:
			return res, fmt.Errorf("from_pod returned %d", ret)
		}
		if got.dst != w.dst {
			res.out = route(got.dst.Addr())
		}
		raw = o
	}
	if hook == "INPUT" {
		res.out = ""
		return res, nil
	}
	if _, ok := e.ifindex[res.out]; !ok {
		return res, nil
	}
	ingress := uint32(worldIfindex)
	if hook == "OUTPUT" {
		ingress = 0
	} else if idx, ok := e.ifindex[in]; ok {
		ingress = idx
	}
	ret, o, err := e.run(e.toPod, raw, res.out, ingress)
	if err != nil {
		return res, err
	}
	if res.pkt, err = parseWirePacket(o); err != nil {
		return res, fmt.Errorf("to_pod's packet: %w", err)
	}
	switch ret {
	case actShot:
		res.verdict = "DROP"
	case actOK:
	default:
		return res, fmt.Errorf("to_pod returned %d", ret)
	}
	return res, nil
}

// refusalKind names the answer w is, as iptables' --reject-with does, or
// returns "" when w is no refusal.
func refusalKind(w wirePacket) string {
	switch {
	case w.proto == policyapi.ProtoTCP && w.tcpFlags&tcpRST != 0:
		return "tcp-reset"
	case w.proto == protoICMP && w.icmpType == 3 && w.icmpCode == 3:
		return "icmp-port-unreachable"
	case w.proto == protoICMPv6 && w.icmpType == 1 && w.icmpCode == 4:
		return "icmp6-port-unreachable"
	}
	return ""
}
