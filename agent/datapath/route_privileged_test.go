//go:build linux

package datapath

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/test/testenv"
)

// The host routing scenario: pod C (trClient4, trClient6) on the node,
// and a pod of another node at remoteV4/remoteV6 (identity 600), behind
// the node's uplink lsup0 (addRemote). C's egress allows it on TCP 8080,
// C's ingress on TCP and UDP 8080. Frontend 10.96.0.20 / fd00:96::20, TCP 80 →
// the remote pod's 8080.
const (
	rtUplink                 = "lsup0"
	rtFrontend4, rtFrontend6 = "10.96.0.20", "fd00:96::20"
	idRemote                 = policyapi.Peer(600)
)

func rtState() *policy.Desired {
	tcp := policyapi.ProtoTCP
	c := &policy.EndpointPolicy{IPv4: addr(trClient4), IPv6: addr(trClient6), IngressIsolated: true, EgressIsolated: true,
		Rules: map[policy.RuleKey][]policy.PortRange{
			{Peer: idRemote, Dir: policyapi.Egress, Proto: tcp}:                 ports(8080, 8080),
			{Peer: idRemote, Dir: policyapi.Ingress, Proto: tcp}:                ports(8080, 8080),
			{Peer: idRemote, Dir: policyapi.Ingress, Proto: policyapi.ProtoUDP}: ports(8080, 8080),
		}}
	return &policy.Desired{
		Addrs: map[netipAddr]policy.AddrEntry{
			addr(trClient4): {Identity: idClient, CIDRClass: policyapi.NoCIDRClass},
			addr(trClient6): {Identity: idClient, CIDRClass: policyapi.NoCIDRClass},
			addr(remoteV4):  {Identity: idRemote, CIDRClass: policyapi.NoCIDRClass},
			addr(remoteV6):  {Identity: idRemote, CIDRClass: policyapi.NoCIDRClass},
		},
		CIDRs:     map[netipPrefix]policyapi.Peer{prefix("0.0.0.0/0"): policyapi.NoCIDRClass, prefix("::/0"): policyapi.NoCIDRClass},
		Endpoints: map[string]*policy.EndpointPolicy{trHostC: c},
		Services: map[policy.ServiceFrontend]*policy.ServiceEntry{
			frontend(rtFrontend4, tcp, 80): {Service: "ns/far", Backends: backends(8080, remoteV4)},
			frontend(rtFrontend6, tcp, 80): {Service: "ns/far", Backends: backends(8080, remoteV6)},
		},
	}
}

// forwarded reads how many packets the stack of n forwarded, both
// families (the Ip ForwDatagrams and Ip6OutForwDatagrams counters of its
// namespace).
func forwarded(t *testing.T, n ns.NetNS) int {
	t.Helper()
	total := 0
	err := n.Do(func(ns.NetNS) error {
		v4, err := snmpCounter("/proc/thread-self/net/snmp", "Ip:", "ForwDatagrams")
		if err != nil {
			return err
		}
		v6, err := snmpCounter("/proc/thread-self/net/snmp6", "", "Ip6OutForwDatagrams")
		total = v4 + v6
		return err
	})
	if err != nil {
		t.Fatalf("read forwarding counters: %v", err)
	}
	return total
}

// snmpCounter reads counter name from path: a /proc/net/snmp table (a
// header line and a value line, both starting with prefix) or, with no
// prefix, /proc/net/snmp6's "name value" lines.
func snmpCounter(path, prefix, name string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var header []string
	for s := bufio.NewScanner(f); s.Scan(); {
		fields := strings.Fields(s.Text())
		if len(fields) == 0 {
			continue
		}
		switch {
		case prefix == "" && len(fields) == 2 && fields[0] == name:
			return strconv.Atoi(fields[1])
		case prefix != "" && fields[0] == prefix && header == nil:
			header = fields
		case prefix != "" && fields[0] == prefix:
			if i := slices.Index(header, name); i > 0 && i < len(fields) {
				return strconv.Atoi(fields[i])
			}
		}
	}
	return 0, fmt.Errorf("no %s in %s", name, path)
}

// Host routing: C's TCP connections to the other node's pod, by address
// and through a ClusterIP, and that pod's TCP connections to C, both
// families, work and never pass the node's stack (its forwarding counters
// stand still, both ways); a UDP datagram the other pod sends C takes the
// stack (only the node's conntrack could tell it from a reply it must
// translate), as does everything once the uplinks are taken away, and the
// pinned links go with them.
func TestPrivilegedHostRouting(t *testing.T) {
	testenv.Privileged(t)
	n := newPodNode(t)
	c := n.addPod(t, trHostC, trClient4, trClient6, true)
	remote := addRemote(t, n.node, nil, rtUplink, "")
	serveWhoAmI(t, c.ns, trClient4+":8080")
	serveWhoAmI(t, c.ns, "["+trClient6+"]:8080")
	serveWhoAmI(t, remote, remoteV4+":8080")
	serveWhoAmI(t, remote, "["+remoteV6+"]:8080")
	mustApply(t, n.d, rtState())

	var uplinks []string
	if err := n.node.Do(func(ns.NetNS) (err error) {
		if uplinks, err = DefaultUplinks(); err != nil {
			return err
		}
		return n.d.SetUplinks(uplinks)
	}); err != nil {
		t.Fatalf("set uplinks: %v", err)
	}
	if !slices.Equal(uplinks, []string{rtUplink}) {
		t.Fatalf("DefaultUplinks = %v, want [%s] (the pod's host veth has link-local addresses only)", uplinks, rtUplink)
	}
	if got, err := n.d.Uplinks(); err != nil || len(got) != 1 {
		t.Fatalf("Uplinks() = %v, %v; want one ifindex", got, err)
	}

	// ask connects from, to dst, and checks the server saw want.
	ask := func(from ns.NetNS, dst, want string) {
		t.Helper()
		got, err := askTCP(from, dst, 2*time.Second)
		if err != nil {
			t.Fatalf("connect to %s: %v", dst, err)
		}
		if host, _, _ := strings.Cut(strings.TrimPrefix(got, "["), "]"); !strings.HasPrefix(host, want) {
			t.Fatalf("connect to %s: server saw %s, want %s", dst, got, want)
		}
	}
	// Fresh links: IPv6 neighbour discovery needs the link-local
	// addresses past duplicate address detection (about a second).
	deadline := time.Now().Add(10 * time.Second)
	for _, a := range []string{remoteV4, remoteV6} {
		for {
			_, err := askTCP(c.ns, hostPort(a, "8080"), time.Second)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("C cannot reach %s: %v", a, err)
			}
		}
	}
	for _, conn := range []struct {
		from      ns.NetNS
		addr, who string
	}{
		{c.ns, hostPort(remoteV4, "8080"), trClient4},
		{c.ns, hostPort(remoteV6, "8080"), trClient6},
		{c.ns, hostPort(rtFrontend4, "80"), trClient4},
		{c.ns, hostPort(rtFrontend6, "80"), trClient6},
		{remote, hostPort(trClient4, "8080"), remoteV4},
		{remote, hostPort(trClient6, "8080"), remoteV6},
	} {
		before := forwarded(t, n.node)
		for range 3 {
			ask(conn.from, conn.addr, conn.who)
		}
		if d := forwarded(t, n.node) - before; d != 0 {
			t.Errorf("to %s: the node's stack forwarded %d packets, want 0 (host routing both ways)", conn.addr, d)
		}
	}

	before := forwarded(t, n.node)
	if got, err := askUDP(remote, hostPort(trClient4, "8080"), 2*time.Second); err != nil || !strings.HasPrefix(got, remoteV4) {
		t.Fatalf("UDP from the remote pod to C: %q, %v", got, err)
	}
	if forwarded(t, n.node) == before {
		t.Errorf("a UDP datagram from the remote pod to C did not pass the node's stack")
	}

	if err := n.node.Do(func(ns.NetNS) error { return n.d.SetUplinks(nil) }); err != nil {
		t.Fatalf("SetUplinks(nil): %v", err)
	}
	if left, err := pinnedUplinks(filepath.Join(n.d.PinRoot(), uplinkDir)); err != nil || len(left) != 0 {
		t.Fatalf("pinned uplink links after SetUplinks(nil) = %v, %v; want none", left, err)
	}
	before = forwarded(t, n.node)
	ask(c.ns, hostPort(remoteV4, "8080"), trClient4)
	if forwarded(t, n.node) == before {
		t.Errorf("with no uplink, C's connection did not pass the node's stack")
	}
}
