//go:build linux

package iptables

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/test/testenv"
)

// TestPrivilegedDataplanesAgree holds the two dataplanes to one semantics
// on random states with Services: each state is applied to the real eBPF
// dataplane (its programs run with BPF_PROG_TEST_RUN) and to the iptables
// dataplane (its rules run by the interpreter of eval_test.go, in
// standalone mode: it translates), and random packets go through both:
// new connections from pods to pods, frontends, the world and the node,
// from the world and the node to pods, and the later packets and replies
// of the connections both accepted, both families, TCP, UDP, SCTP, ICMP
// and a protocol without ports.
//
// A new connection's first packet must get the same verdict from both
// (allowed, dropped, or refused with the same answer). A translated one
// must reach a backend the nat table could have chosen (the nat table
// chooses at random: the interpreter lists every choice), judged the same
// there, and the interpreter's client then takes the same choice, so that
// ClientIP affinity must keep both on it. A later packet must reach the
// same backend, a reply must come back from the frontend it was sent to
// (iptables leaves both to conntrack), and every checksum the programs
// leave must be right. The same first packets must also get what
// refPaths, the model TestSemanticsMatchEBPF holds the rules to, says of
// the eBPF programs. Where the dataplanes differ by design (byDesign), the
// test checks that each does its own part, and counts it.
//
// One more difference is left out rather than compared ("half-open"): a
// packet that reuses the tuple of a connection one pod's egress allowed
// and the other's ingress dropped passes back through the sender's
// isolated ingress under eBPF (conntrack per endpoint: the sender's entry
// exists) and is judged as new under iptables (netfilter never confirmed
// the connection). Every new connection here has a fresh source port, and
// a protocol without ports is sent once per address pair and state.
//
// Each state starts without connections (both forget theirs); the states
// are applied one after another, so the dataplanes' incremental applies
// are what run.
func TestPrivilegedDataplanesAgree(t *testing.T) {
	testenv.Privileged(t)
	states, packets := 500, 200
	if testing.Short() {
		states = 30
	}
	e := newEBPFNode(t)
	n := newFakeNode()
	ipt, err := New(Options{Mode: ModeNFT, Runner: n, TranslateServices: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range semIfs {
		if err := ipt.Attach(name); err != nil {
			t.Fatal(err)
		}
	}
	c := &comparison{e: e, n: n, rng: rand.New(rand.NewPCG(11, 23)), kinds: map[string]int{}, port: 1024}
	for s := range states {
		c.want = randomDesired(c.rng)
		mustApply(t, ipt, c.want)
		if err := e.d.Apply(c.want); err != nil {
			t.Fatalf("state %d: apply to the eBPF dataplane: %v", s, err)
		}
		e.forget(t)
		n.mu.Lock()
		n.recent = map[string]map[netip.Addr]bool{}
		n.mu.Unlock()
		c.route = routeTo(c.want)
		c.flows, c.translated, c.used = nil, nil, map[[2]netip.Addr]bool{}
		for range packets {
			var err error
			if len(c.flows) > 0 && c.rng.IntN(3) == 0 {
				// Half of them to a connection through a frontend,
				// when there is one.
				flows := c.flows
				if len(c.translated) > 0 && c.rng.IntN(2) == 0 {
					flows = c.translated
				}
				err = c.followUp(flows[c.rng.IntN(len(flows))], c.rng.IntN(2) == 0)
			} else {
				err = c.first(randomPacketOf(c.rng, c.want, 2))
			}
			if err != nil {
				t.Fatalf("state %d: %v\nendpoints: %s\naddrs: %v\ncidrs: %v\nservices: %s\nifindexes: %v",
					s, err, dumpEndpoints(c.want), c.want.Addrs, c.want.CIDRs, dumpServices(c.want), e.ifindex)
			}
		}
	}
	t.Logf("checked: %v", c.kinds)
	for k, least := range map[string]int{
		"first ACCEPT": states, "first DROP": states, "reply": states, "later": states,
		"refused": states / 2, "translated ACCEPT": states / 2, "translated DROP": states / 2, "random choice": states / 2,
		"affinity kept": states / 2, "later translated": states / 2, "reply translated": states / 2,
		"by design: sctp-port": states / 2, "SCTP translated": states / 2,
		"hairpin": states / 8, "later hairpin": states / 8, "reply hairpin": states / 8,
		"ND or MLD ACCEPT": states / 8, "ND or MLD DROP": states / 2,
	} {
		if c.kinds[k] < least {
			t.Errorf("only %d packets %q, want %d: the random states test too little of it (%v)", c.kinds[k], k, least, c.kinds)
		}
	}
}

// comparison is the state of TestPrivilegedDataplanesAgree.
type comparison struct {
	e     *ebpfNode
	n     *fakeNode
	rng   *rand.Rand
	want  *policy.Desired
	route func(netip.Addr) string
	kinds map[string]int
	// port is the next source port (and ICMP echo identifier): every new
	// connection has a tuple neither dataplane has seen.
	port uint16
	// flows are the connections of this state both dataplanes accepted,
	// translated those of them through a frontend.
	flows, translated []*flow
	// used are the address pairs of this state's packets of protocols
	// without ports, which conntrack tells apart by addresses alone.
	used map[[2]netip.Addr]bool
}

// flow is a connection both dataplanes accepted.
type flow struct {
	p    testPacket // its first packet, as the iptables interpreter saw it
	sent wirePacket // its first packet, as the client sent it
	// got is its first packet as the eBPF programs delivered it, by the
	// interface via (the client's for a hairpin).
	got     wirePacket
	via     string
	hairpin bool
	// to is the backend the iptables interpreter chose (the same as the
	// programs'), invalid when untranslated; out the interface its
	// routing sent the first packet to.
	to  netip.AddrPort
	out string
}

// nextPort returns a source port no earlier connection of the test used.
func (c *comparison) nextPort() uint16 {
	c.port++
	if c.port == 0 {
		c.port = 1024
	}
	return c.port
}

// linkScope reports whether a is link-local or link-scope multicast.
func linkScope(a netip.Addr) bool {
	return linkLocal.Contains(a) || linkMcast.Contains(a)
}

// wireOf is the first packet of a new connection p: a TCP SYN, an ICMP
// echo request where p says echo (ICMPv4 type 0 stands for it).
func (c *comparison) wireOf(p testPacket) wirePacket {
	w := wirePacket{proto: p.proto, icmpType: p.icmpType, hopLimit: p.hopLimit}
	var sport, dport uint16
	switch {
	case p.proto == policyapi.ProtoTCP:
		w.tcpFlags = tcpSYN
		sport, dport = c.nextPort(), p.dport
	case p.proto == policyapi.ProtoUDP || p.proto == policyapi.ProtoSCTP:
		sport, dport = c.nextPort(), p.dport
	case p.proto == protoICMP && p.icmpType == 0:
		w.icmpType = 8
		fallthrough
	case isEcho(w.proto, w.icmpType):
		sport = c.nextPort()
		dport = sport
	}
	w.src, w.dst = netip.AddrPortFrom(p.src, sport), netip.AddrPortFrom(p.dst, dport)
	return w
}

// first sends p, a new connection's first packet, through both
// dataplanes and compares what they do.
func (c *comparison) first(p testPacket) error {
	p.established = false
	if p.src == p.dst {
		// No such packet reaches the node: a pod's packet to itself
		// never leaves it (a hairpin through a frontend has two
		// different ends), and another host's is a martian.
		return nil
	}
	if p.hook == "FORWARD" && (linkScope(p.src) || linkScope(p.dst)) {
		// Nor is one forwarded: a router forwards nothing from or to a
		// link-local or link-scope multicast address (RFC 4291 2.5.6),
		// the kernel answers it with an ICMPv6 error instead.
		return nil
	}
	w := c.wireOf(p)
	if w.src.Port() == 0 {
		pair := [2]netip.Addr{p.src, p.dst}
		if p.dst.Less(p.src) {
			pair = [2]netip.Addr{p.dst, p.src}
		}
		if c.used[pair] {
			return nil // a packet of an earlier "connection": half-open
		}
		c.used[pair] = true
	}
	res, err := c.e.traverse(buildFrame(w), p.hook, p.in, p.out, c.route)
	if err != nil {
		return fmt.Errorf("%v (%v): eBPF: %w", p, w, err)
	}
	paths, err := c.n.evalPaths(ModeNFT, p, c.route)
	if err != nil {
		return fmt.Errorf("%v: iptables: %w", p, err)
	}
	model := refPaths(c.want, p, c.route, ebpfDataplane)
	var to netip.AddrPort // the backend the programs chose, when known
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%v (%v):\n%s\neBPF:     %s %v hairpin=%v by %s, backend %v\niptables: %v\nmodel:    %v",
			p, w, fmt.Sprintf(format, args...), res.verdict, res.pkt, res.hairpin, res.out, to, paths, model)
	}
	fr := policy.ServiceFrontend{Addr: p.dst, Port: p.dport, Proto: p.proto}
	entry := c.want.Services[fr]

	// Where the programs sent it: the translated destination, or for a
	// packet dropped before it showed, the backend recorded for the
	// client's affinity.
	if !isReject(res.verdict) && (res.pkt.dst != w.dst || res.hairpin) {
		to = res.pkt.dst
	}
	if !to.IsValid() && res.verdict == "DROP" && entry != nil && entry.AffinityTimeout > 0 && sourceOK(c.want.Endpoints[p.in], p) {
		if to, err = c.e.affinityOf(w.dst, p.proto, p.src); err != nil {
			return fail("%v", err)
		}
	}
	switch {
	case isReject(res.verdict):
		if res.pkt.src.Addr() != p.dst || res.pkt.dst.Addr() != p.src {
			return fail("the refusal goes %v, want from %s to %s", res.pkt, p.dst, p.src)
		}
		c.kinds["refused"]++
	case res.hairpin:
		// The named difference that changes no verdict: the programs
		// give the pod its own connection from the frontend's address.
		if res.pkt.src != netip.AddrPortFrom(p.dst, w.src.Port()) {
			return fail("hairpin from %v, want from the frontend %s, the client's port %d", res.pkt.src, p.dst, w.src.Port())
		}
		c.kinds["hairpin"]++
	case res.verdict == "ACCEPT" && res.pkt.src != w.src:
		return fail("the programs changed the source to %v", res.pkt.src)
	}
	if to.IsValid() && !res.hairpin {
		c.kinds["translated "+res.verdict]++
		if p.proto == policyapi.ProtoSCTP {
			c.kinds["SCTP translated"]++
		}
	}
	c.kinds["first "+res.verdict]++
	if isND(p) {
		c.kinds["ND or MLD "+res.verdict]++
	}

	design := byDesign(c.want, p)
	if !matches(model, res.verdict, to, res.hairpin) {
		return fail("the model of the programs (refPaths) does not allow what they did")
	}
	var choice *pathVerdict
	switch design {
	case "":
		choices := choicesOf(paths, res.verdict, to, res.hairpin)
		if len(choices) == 0 {
			return fail("the iptables dataplane could not have done what the eBPF dataplane did")
		}
		choice = choices[c.rng.IntN(len(choices))]
		if entry != nil && len(entry.Backends) > 1 && to.IsValid() && to != netip.AddrPortFrom(entry.Backends[0].Addr, entry.Backends[0].Port) {
			c.kinds["random choice"]++
		}
		if entry != nil && entry.AffinityTimeout > 0 && len(entry.Backends) > 1 && len(paths) == 1 {
			c.kinds["affinity kept"]++
		}
	case "sctp-port":
		// The programs leave it untranslated, the rules translate it.
		if to.IsValid() {
			return fail("by design %s: the programs translated it", design)
		}
		for i := range paths {
			if !paths[i].to.IsValid() {
				return fail("by design %s: the rules left it untranslated", design)
			}
		}
		choice = &paths[c.rng.IntN(len(paths))]
		c.kinds["by design: "+design]++
	default:
		return fail("unknown difference %q", design)
	}

	// The interpreter's client takes the path the programs took: the
	// kernel adds it to the path's affinity lists in nat PREROUTING,
	// whatever the filter table decides next.
	c.n.mu.Lock()
	for _, l := range choice.lists {
		if c.n.recent[l] == nil {
			c.n.recent[l] = map[netip.Addr]bool{}
		}
		c.n.recent[l][p.src] = true
	}
	c.n.mu.Unlock()

	// An echo reply opens nothing: netfilter's conntrack starts a
	// connection on an echo request only, and so does lockstep's.
	tracked := p.proto == policyapi.ProtoTCP || p.proto == policyapi.ProtoUDP || p.proto == policyapi.ProtoSCTP ||
		w.proto == protoICMP && w.icmpType == 8 || w.proto == protoICMPv6 && w.icmpType == 128
	if design == "" && res.verdict == "ACCEPT" && tracked {
		f := &flow{p: p, sent: w, got: res.pkt, via: res.out, hairpin: res.hairpin, to: choice.to, out: p.out}
		if f.to.IsValid() {
			f.out = c.route(f.to.Addr())
			c.translated = append(c.translated, f)
		}
		c.flows = append(c.flows, f)
	}
	return nil
}

// matches reports whether paths hold one that does what the programs did
// and that can happen (its probability is not 0): the same verdict, to the
// same backend when the programs' is known, the source masqueraded exactly
// when the programs made it a hairpin.
func matches(paths []pathVerdict, verdict string, to netip.AddrPort, hairpin bool) bool {
	return len(choicesOf(paths, verdict, to, hairpin)) > 0
}

// choicesOf returns the paths matches looks for.
func choicesOf(paths []pathVerdict, verdict string, to netip.AddrPort, hairpin bool) []*pathVerdict {
	var out []*pathVerdict
	for i, pv := range paths {
		ok := pv.verdict == verdict && pv.prob > 1e-9
		switch {
		case verdict == "ACCEPT":
			ok = ok && pv.to == to && pv.masq == hairpin
		case verdict == "DROP" && to.IsValid():
			ok = ok && pv.to == to
		}
		if ok {
			out = append(out, &paths[i])
		}
	}
	return out
}

// followUp sends a later packet of f (reply false) or a reply to it
// through both dataplanes: both pass it as part of the connection, the
// programs to the backend of its first packet, and a reply back from the
// address and port the client sent to, as conntrack has it for iptables.
func (c *comparison) followUp(f *flow, reply bool) error {
	p := f.p
	w := f.sent
	q := p
	q.established = true
	var want wirePacket // what the programs must deliver
	var hook, in, out string
	if !reply {
		if w.proto == policyapi.ProtoTCP {
			w.tcpFlags = tcpACK
		}
		hook, in, out = p.hook, p.in, p.out
		want = f.got
		if f.to.IsValid() {
			q.dst, q.dport, q.out, q.dnat = f.to.Addr(), f.to.Port(), f.out, true
		}
	} else {
		// The responder answers what it received.
		w = wirePacket{src: f.got.dst, dst: f.got.src, proto: w.proto, icmpType: w.icmpType}
		switch {
		case w.proto == policyapi.ProtoTCP:
			w.tcpFlags = tcpSYN | tcpACK
		case w.icmpType == 8:
			w.icmpType = 0
		case w.icmpType == 128:
			w.icmpType = 129
		}
		want = wirePacket{src: f.sent.dst, dst: f.sent.src, proto: w.proto, icmpType: w.icmpType, tcpFlags: w.tcpFlags}
		q.src, q.dst, q.dport, q.icmpType = p.dst, p.src, f.sent.src.Port(), w.icmpType
		if f.to.IsValid() {
			q.src = f.to.Addr()
		}
		switch p.hook {
		case "FORWARD":
			hook, in, out = "FORWARD", f.via, p.in
			q.in, q.out = f.out, p.in
		case "INPUT":
			hook, in, out = "OUTPUT", "", p.in
			q.hook, q.in, q.out = "OUTPUT", "", p.in
		case "OUTPUT":
			hook, in, out = "INPUT", p.out, ""
			q.hook, q.in, q.out = "INPUT", p.out, ""
		}
	}
	res, err := c.e.traverse(buildFrame(w), hook, in, out, c.route)
	if err != nil {
		return fmt.Errorf("follow-up %v of %v: eBPF: %w", w, p, err)
	}
	c.n.mu.Lock()
	v, err := c.n.filterVerdict(ModeNFT, q)
	c.n.mu.Unlock()
	if err != nil {
		return fmt.Errorf("follow-up %v of %v: iptables: %w", q, p, err)
	}
	what := "later"
	if reply {
		what = "reply"
	}
	if res.verdict != v {
		return fmt.Errorf("%s %v (iptables: %v) of the connection %v (%v):\neBPF:     %s %v\niptables: %s",
			what, w, q, p, f.sent, res.verdict, res.pkt, v)
	}
	if v != "ACCEPT" {
		c.kinds[what+" "+v]++
		return nil
	}
	if res.pkt.src != want.src || res.pkt.dst != want.dst {
		return fmt.Errorf("%s %v of the connection %v (%v), first delivered as %v: the programs deliver %v, want %v",
			what, w, p, f.sent, f.got, res.pkt, want)
	}
	switch {
	case f.hairpin:
		c.kinds[what+" hairpin"]++
	case f.to.IsValid():
		c.kinds[what+" translated"]++
	default:
		c.kinds[what]++
	}
	return nil
}
