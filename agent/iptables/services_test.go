package iptables

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// Frontends of svcState.
var (
	feWeb   = policy.ServiceFrontend{Addr: addr("10.96.0.10"), Port: 80, Proto: policyapi.ProtoTCP}
	feDNS   = policy.ServiceFrontend{Addr: addr("10.96.0.10"), Port: 53, Proto: policyapi.ProtoUDP}
	feWeb6  = policy.ServiceFrontend{Addr: addr("fd96::10"), Port: 80, Proto: policyapi.ProtoTCP}
	feEmpty = policy.ServiceFrontend{Addr: addr("10.96.0.20"), Port: 80, Proto: policyapi.ProtoTCP}
)

// svcState is twoPods' node with a client endpoint ls-c (10.0.0.1,
// fd00::1, identity 300) whose egress allows TCP 8080 to identity 400,
// and four frontends: web (TCP 80 to 10.0.0.5:8080, the server, and
// 10.0.0.6:8080, a remote pod), dns (UDP 53 to 10.0.0.5:5353), web6 (TCP
// 80 to [fd00::5]:8080) and empty (TCP 80, no backend).
func svcState() *policy.Desired {
	d := twoPods(300)
	d.Addrs[addr("10.0.0.6")] = policy.AddrEntry{Identity: 400, CIDRClass: policyapi.NoCIDRClass}
	d.Endpoints["ls-c"] = &policy.EndpointPolicy{IPv4: addr("10.0.0.1"), IPv6: addr("fd00::1"), EgressIsolated: true,
		Rules: map[policy.RuleKey][]policy.PortRange{{Peer: 400, Dir: policyapi.Egress, Proto: policyapi.ProtoTCP}: ports(8080, 8080)}}
	d.Services = map[policy.ServiceFrontend]*policy.ServiceEntry{
		feWeb:   {Service: "default/web", Backends: []policy.ServiceBackend{{Addr: addr("10.0.0.5"), Port: 8080}, {Addr: addr("10.0.0.6"), Port: 8080}}},
		feDNS:   {Service: "kube-system/dns", Backends: []policy.ServiceBackend{{Addr: addr("10.0.0.5"), Port: 5353}}},
		feWeb6:  {Service: "default/web", Backends: []policy.ServiceBackend{{Addr: addr("fd00::5"), Port: 8080}}},
		feEmpty: {Service: "default/empty"},
	}
	return d
}

// withServices returns a copy of d whose Services are d's with change
// applied to a copy of the entry of fr (nil deletes the frontend).
func withService(d *policy.Desired, fr policy.ServiceFrontend, e *policy.ServiceEntry) *policy.Desired {
	c := *d
	c.Services = maps.Clone(d.Services)
	if e == nil {
		delete(c.Services, fr)
	} else {
		c.Services[fr] = e
	}
	return &c
}

func TestRenderServices(t *testing.T) {
	// A frontend without a backend on this node (internalTrafficPolicy
	// Local) is no refused frontend: kube-proxy drops its connections.
	noLocal := policy.ServiceFrontend{Addr: addr("10.96.0.21"), Port: 80, Proto: policyapi.ProtoTCP}
	want := withService(svcState(), noLocal, &policy.ServiceEntry{Service: "default/local", NoLocalBackend: true})
	web, dns, web6 := svcChainName(feWeb), svcChainName(feDNS), svcChainName(feWeb6)
	for _, c := range []string{web, dns, web6, svcChainName(feEmpty)} {
		if len(c) != len(svcPrefix)+unionHashLen || c != strings.ToUpper(c) {
			t.Errorf("chain name %q: want %s and %d upper-case digits", c, svcPrefix, unionHashLen)
		}
	}
	if web == dns || web == web6 {
		t.Fatalf("frontends share a chain name: %s %s %s", web, dns, web6)
	}
	r := renderer{mode: ModeNFT, fams: []Family{IPv4, IPv6}, translate: true}
	p, _, err := r.render(want, nil)
	if err != nil {
		t.Fatal(err)
	}
	wantNAT4 := map[string][]string{
		chainSvcPods: {"-s 10.0.0.5/32 -i ls-a -j LOCKSTEP-SVC-ALL", "-s 10.0.0.1/32 -i ls-c -j LOCKSTEP-SVC-ALL"},
		chainSvcAll: {
			"-d 10.96.0.10/32 -p tcp -m comment --comment \"default/web\" -m tcp --dport 80 -j " + web,
			"-d 10.96.0.10/32 -p udp -m comment --comment \"kube-system/dns\" -m udp --dport 53 -j " + dns,
		},
		web: {
			"-p tcp -m statistic --mode random --probability 0.50000000000 -j DNAT --to-destination 10.0.0.5:8080",
			"-p tcp -j DNAT --to-destination 10.0.0.6:8080",
		},
		dns:          {"-p udp -j DNAT --to-destination 10.0.0.5:5353"},
		chainHairpin: {"-s 10.0.0.5/32 -d 10.0.0.5/32 -m conntrack --ctstate DNAT -j MASQUERADE"},
	}
	if diff := chainsDiff(p.nat[0], wantNAT4); diff != "" {
		t.Errorf("IPv4 nat chains:\n%s", diff)
	}
	if got := p.nat[1][web6]; !slices.Equal(got, []string{"-p tcp -j DNAT --to-destination [fd00::5]:8080"}) {
		t.Errorf("IPv6 chain of web6: %q", got)
	}
	if got := p.nat[1][chainHairpin]; !slices.Equal(got, []string{"-s fd00::5/128 -d fd00::5/128 -m conntrack --ctstate DNAT -j MASQUERADE"}) {
		t.Errorf("IPv6 hairpin: %q", got)
	}
	noep4, noep6 := p.sets["lockstep-nft4-noep"], p.sets["lockstep-nft6-noep"]
	if noep4 == nil || noep6 == nil || !maps.Equal(setMembers(noep4), map[string]bool{"10.96.0.20,tcp:80": false}) || noep6.size() != 0 {
		t.Fatalf("sets of frontends without backends: %v, %v; want 10.96.0.20,tcp:80 and an empty IPv6 one", noep4, noep6)
	}
	for i, f := range []Family{IPv4, IPv6} {
		refuse := "-m set --match-set " + noepSetName(ModeNFT, f) + " dst,dst -j LOCKSTEP-REJECT"
		for _, ep := range []string{"ls-a", "ls-c"} {
			if e := p.chains[i][egressPrefix+ep]; len(e) < 2 || e[1] != refuse {
				t.Errorf("%s egress chain of %s: %q; want the refusal right after anti-spoofing", f, ep, e)
			}
		}
		if got := p.chains[i][chainReject]; !slices.Equal(got, rejectRules(f)) {
			t.Errorf("%s %s: %q", f, chainReject, got)
		}
	}
	if got := rejectRules(IPv6); got[1] != "-j REJECT --reject-with icmp6-port-unreachable" || got[0] != "-p tcp -j REJECT --reject-with tcp-reset" {
		t.Errorf("IPv6 refusal: %q", got)
	}

	// Kubernetes mode: kube-proxy translates; only the refusal is ours.
	k := renderer{mode: ModeNFT, fams: []Family{IPv4, IPv6}}
	p, _, err = k.render(want, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.nat[0] != nil || p.nat[1] != nil {
		t.Errorf("nat chains without translation: %v", p.nat)
	}
	if p.sets["lockstep-nft4-noep"] == nil || p.chains[0][chainReject] == nil {
		t.Error("no refusal of frontends without backends in Kubernetes mode")
	}
	// No Service at all: nothing of this.
	p, _, err = r.render(twoPods(300), nil)
	if err != nil {
		t.Fatal(err)
	}
	if p.nat[0] != nil || p.nat[1] != nil || p.sets["lockstep-nft4-noep"] != nil || p.chains[0][chainReject] != nil {
		t.Errorf("a node without Services got Service rules: nat %v", p.nat)
	}
}

// chainsDiff describes how got differs from want (empty when equal).
func chainsDiff(got, want map[string][]string) string {
	var b strings.Builder
	diffChains(&b, "", got, want, func(string) bool { return false })
	return b.String()
}

func TestRenderAffinity(t *testing.T) {
	fr := feWeb
	bs := []policy.ServiceBackend{{Addr: addr("10.0.0.5"), Port: 8080}, {Addr: addr("10.0.0.6"), Port: 8080}}
	l5, l6 := affinityList(fr, bs[0]), affinityList(fr, bs[1])
	if l5 == l6 || !strings.HasPrefix(l5, "lockstep-") {
		t.Fatalf("affinity lists %q and %q", l5, l6)
	}
	got := renderDNAT(fr, 90*time.Minute+time.Millisecond, bs)
	want := []string{
		"-p tcp -m recent --update --seconds 5401 --reap --name " + l5 + " --mask 255.255.255.255 --rsource -j DNAT --to-destination 10.0.0.5:8080",
		"-p tcp -m recent --update --seconds 5401 --reap --name " + l6 + " --mask 255.255.255.255 --rsource -j DNAT --to-destination 10.0.0.6:8080",
		"-p tcp -m statistic --mode random --probability 0.50000000000 -m recent --set --name " + l5 + " --mask 255.255.255.255 --rsource -j DNAT --to-destination 10.0.0.5:8080",
		"-p tcp -m recent --set --name " + l6 + " --mask 255.255.255.255 --rsource -j DNAT --to-destination 10.0.0.6:8080",
	}
	if !slices.Equal(got, want) {
		t.Errorf("rules:\n got %q\nwant %q", got, want)
	}
	v6 := renderDNAT(feWeb6, time.Second, []policy.ServiceBackend{{Addr: addr("fd00::5"), Port: 8080}})
	if !strings.Contains(v6[0], "--seconds 1 --reap") || !strings.Contains(v6[0], "--mask ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff") {
		t.Errorf("IPv6 affinity: %q", v6)
	}
}

func TestProbability(t *testing.T) {
	for _, tt := range []struct {
		n    int
		want string
	}{{2, "0.50000000000"}, {3, "0.33333333349"}, {4, "0.25000000000"}, {10, "0.10000000009"}} {
		if got := probability(tt.n); got != tt.want {
			t.Errorf("probability(%d) = %s, want %s", tt.n, got, tt.want)
		}
	}
}

// TestServiceBackendsEquallyLikely: for 1 to 20 backends, the rules send a
// new connection to each with probability 1/n (the kernel's 31-bit
// rounding aside), as the eBPF dataplane's uniform choice does.
func TestServiceBackendsEquallyLikely(t *testing.T) {
	for n := 1; n <= 20; n++ {
		d := svcState()
		var bs []policy.ServiceBackend
		for i := range n {
			bs = append(bs, policy.ServiceBackend{Addr: netip.AddrFrom4([4]byte{10, 1, 0, byte(i)}), Port: 8080})
		}
		d = withService(d, feWeb, &policy.ServiceEntry{Backends: bs})
		node := newFakeNode()
		dp, err := New(Options{Mode: ModeLegacy, Runner: node, TranslateServices: true})
		if err != nil {
			t.Fatal(err)
		}
		attachAll(t, dp, d)
		mustApply(t, dp, d)
		out, err := node.natOutcomes(ModeLegacy, "PREROUTING", testPacket{hook: "FORWARD", in: "ls-c", src: addr("10.0.0.1"), dst: feWeb.Addr, proto: 6, dport: 80})
		if err != nil {
			t.Fatal(err)
		}
		got := map[netip.AddrPort]float64{}
		for _, o := range out {
			got[o.to] += o.prob
		}
		if len(got) != n {
			t.Fatalf("%d backends: the rules reach %v", n, got)
		}
		for _, b := range bs {
			if p := got[netip.AddrPortFrom(b.Addr, b.Port)]; math.Abs(p-1/float64(n)) > 1e-8 {
				t.Errorf("%d backends: %v chosen with probability %v", n, b, p)
			}
		}
	}
}

// TestServiceAffinity: with ClientIP affinity a client's connections go
// where its first one went; another client chooses afresh, and a spoofed
// one is not translated at all.
func TestServiceAffinity(t *testing.T) {
	d := withService(svcState(), feWeb, &policy.ServiceEntry{AffinityTimeout: time.Hour, Backends: svcState().Services[feWeb].Backends})
	n := newFakeNode()
	dp, err := New(Options{Mode: ModeNFT, Runner: n, TranslateServices: true})
	if err != nil {
		t.Fatal(err)
	}
	attachAll(t, dp, d)
	mustApply(t, dp, d)
	n.recent = map[string]map[netip.Addr]bool{}
	connect := func(in, src string) []natOutcome {
		out, err := n.natOutcomes(ModeNFT, "PREROUTING", testPacket{hook: "FORWARD", in: in, src: addr(src), dst: feWeb.Addr, proto: 6, dport: 80})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	first := connect("ls-c", "10.0.0.1")
	if len(first) != 2 {
		t.Fatalf("first connection: %v, want either backend", first)
	}
	// The connection went to the second backend: the kernel adds the
	// client to that backend's list.
	chosen := first[1]
	for _, l := range chosen.lists {
		if n.recent[l] == nil {
			n.recent[l] = map[netip.Addr]bool{}
		}
		n.recent[l][addr("10.0.0.1")] = true
	}
	for range 3 {
		again := connect("ls-c", "10.0.0.1")
		if len(again) != 1 || again[0].to != chosen.to || again[0].prob != 1 {
			t.Fatalf("next connection: %v, want %v only", again, chosen.to)
		}
	}
	if other := connect("ls-a", "10.0.0.5"); len(other) != 2 {
		t.Errorf("another client: %v, want either backend", other)
	}
	// A pod that sends from the client's address is not translated, so
	// it cannot keep (or choose) the client's affinity backend.
	if spoofed := connect("ls-a", "10.0.0.1"); len(spoofed) != 1 || spoofed[0].to.IsValid() || len(spoofed[0].lists) > 0 {
		t.Errorf("a packet from ls-a with ls-c's address: %v, want it untranslated", spoofed)
	}
}

// TestApplyServicesIncremental: after a full apply, a change to one
// frontend rewrites that frontend's chain or its jump only, and an
// endpoint that comes or goes adds or deletes one dispatch rule.
func TestApplyServicesIncremental(t *testing.T) {
	base := svcState()
	moreBackends := withService(base, feWeb, &policy.ServiceEntry{Service: "default/web", Backends: append(slices.Clone(base.Services[feWeb].Backends), policy.ServiceBackend{Addr: addr("10.0.0.7"), Port: 8080})})
	feSCTP := policy.ServiceFrontend{Addr: addr("10.96.0.30"), Port: 443, Proto: policyapi.ProtoSCTP}
	lostBackends := withService(base, feDNS, &policy.ServiceEntry{Service: "kube-system/dns"})
	newFrontend := withService(base, feSCTP, &policy.ServiceEntry{Backends: []policy.ServiceBackend{{Addr: addr("10.0.0.6"), Port: 443}}})
	newEndpoint := withService(base, feWeb, base.Services[feWeb])
	newEndpoint.Endpoints = maps.Clone(base.Endpoints)
	newEndpoint.Endpoints["ls-d"] = &policy.EndpointPolicy{IPv4: addr("10.0.0.9")}
	tests := []struct {
		name       string
		next       *policy.Desired
		wantCalls  []string
		wantChains []string // chains the IPv4 payload touches
		wantLines  []string // lines it must have
	}{
		{name: "nothing changed", next: withService(base, feWeb, base.Services[feWeb])},
		{name: "a backend more", next: moreBackends,
			wantCalls:  []string{"iptables-nft-restore -w 5 --noflush"},
			wantChains: []string{svcChainName(feWeb)},
			wantLines:  []string{"-F " + svcChainName(feWeb), "-A " + svcChainName(feWeb) + " -p tcp -j DNAT --to-destination 10.0.0.7:8080"}},
		{name: "a frontend more", next: newFrontend,
			wantCalls:  []string{"iptables-nft-restore -w 5 --noflush"},
			wantChains: slices.Sorted(slices.Values([]string{chainSvcAll, svcChainName(feSCTP)})),
			wantLines:  []string{"-A " + svcChainName(feSCTP) + " -p sctp -j DNAT --to-destination 10.0.0.6:443"}},
		{name: "the last backend gone", next: lostBackends,
			wantCalls:  []string{"ipset -exist restore", "iptables-nft-restore -w 5 --noflush"},
			wantChains: []string{chainSvcAll, svcChainName(feDNS)},
			wantLines:  []string{"-D " + chainSvcAll + " -d 10.96.0.10/32 -p udp -m comment --comment \"kube-system/dns\" -m udp --dport 53 -j " + svcChainName(feDNS), "-X " + svcChainName(feDNS)}},
		{name: "an endpoint more", next: newEndpoint,
			wantCalls:  []string{"iptables-nft-restore -w 5 --noflush", "ip6tables-nft-restore -w 5 --noflush"},
			wantChains: []string{egressPrefix + "ls-d", chainForward, ingressPrefix + "ls-d", chainInput, chainSvcPods},
			wantLines:  []string{"-A " + chainSvcPods + " -s 10.0.0.9/32 -i ls-d -j " + chainSvcAll}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newFakeNode()
			d := newTestDataplane(t, ModeNFT, n, base, tt.next)
			d.r.translate = true
			mustApply(t, d, base)
			n.takeCalls()
			mustApply(t, d, tt.next)
			var got []string
			for _, c := range n.takeCalls() {
				got = append(got, c.String())
				if c.name != ModeNFT.RestoreTool(IPv4) {
					continue
				}
				if chains := payloadChains(c.stdin); !slices.Equal(chains, tt.wantChains) {
					t.Errorf("payload touches %q, want %q:\n%s", chains, tt.wantChains, c.stdin)
				}
				for _, line := range tt.wantLines {
					if !strings.Contains(c.stdin, line+"\n") {
						t.Errorf("payload lacks %q:\n%s", line, c.stdin)
					}
				}
			}
			slices.Sort(got)
			slices.Sort(tt.wantCalls)
			if !slices.Equal(got, tt.wantCalls) {
				t.Errorf("calls %q, want %q", got, tt.wantCalls)
			}
			assertNoViolations(t, n)
			assertTranslatedView(t, n, ModeNFT, tt.next)
		})
	}
}

// assertTranslatedView is assertView for a dataplane that translates.
func assertTranslatedView(tb testing.TB, n *fakeNode, m Mode, want *policy.Desired) {
	tb.Helper()
	fresh := newFakeNode()
	d, err := New(Options{Mode: m, Runner: fresh, TranslateServices: true})
	if err != nil {
		tb.Fatal(err)
	}
	attachAll(tb, d, want)
	mustApply(tb, d, want)
	if diff := diffViews(n.view(m), fresh.view(m)); diff != "" {
		tb.Fatalf("node state differs from the desired state:\n%s", diff)
	}
}

// TestApplyServicesCommitOrder: when the policy and a frontend's backends
// change in one Apply, each family is one iptables-restore of three
// commits: the nat table without the backend that goes, the filter
// table, then the nat table with the backend that comes. A frontend
// whose backends are all replaced is refused in between: it joins the set
// of frontends without backends before the commits and leaves it after.
func TestApplyServicesCommitOrder(t *testing.T) {
	base := svcState()
	next := withService(base, feWeb, &policy.ServiceEntry{Service: "default/web", Backends: []policy.ServiceBackend{{Addr: addr("10.0.0.6"), Port: 8080}, {Addr: addr("10.0.0.7"), Port: 8080}}})
	next = withService(next, feDNS, &policy.ServiceEntry{Service: "kube-system/dns", Backends: []policy.ServiceBackend{{Addr: addr("10.0.0.6"), Port: 5353}}})
	next.Endpoints = maps.Clone(base.Endpoints)
	next.Endpoints["ls-a"] = twoPods(301).Endpoints["ls-a"] // the policy changes too
	for _, m := range []Mode{ModeNFT, ModeLegacy} {
		t.Run(m.String(), func(t *testing.T) {
			n := newFakeNode()
			d, err := New(Options{Mode: m, Runner: n, TranslateServices: true})
			if err != nil {
				t.Fatal(err)
			}
			attachAll(t, d, base)
			mustApply(t, d, base)
			n.takeCalls()
			mustApply(t, d, next)
			calls := n.takeCalls()
			var v4 fakeCall
			var ipsets []fakeCall
			for _, c := range calls {
				switch c.name {
				case m.RestoreTool(IPv4):
					v4 = c
				case ipsetTool:
					ipsets = append(ipsets, c)
				}
			}
			var tables []string
			for _, line := range strings.Split(v4.stdin, "\n") {
				if strings.HasPrefix(line, "*") {
					tables = append(tables, line)
				}
			}
			if !slices.Equal(tables, []string{"*nat", "*filter", "*nat"}) {
				t.Fatalf("IPv4 commits %q, want *nat *filter *nat:\n%s", tables, v4.stdin)
			}
			blocks := strings.SplitAfter(v4.stdin, "COMMIT\n")
			web := svcChainName(feWeb)
			if !strings.Contains(blocks[0], "-A "+web+" -p tcp -j DNAT --to-destination 10.0.0.6:8080\n") || strings.Contains(blocks[0], "10.0.0.7") {
				t.Errorf("first nat commit must keep only the backend common to both states:\n%s", blocks[0])
			}
			if !strings.Contains(blocks[0], "-D "+chainSvcAll) || !strings.Contains(blocks[0], svcChainName(feDNS)) {
				t.Errorf("first nat commit must stop translating dns (no backend in common):\n%s", blocks[0])
			}
			if !strings.Contains(blocks[2], "10.0.0.7:8080") || !strings.Contains(blocks[2], "-A "+chainSvcAll) {
				t.Errorf("last nat commit must add the new backends:\n%s", blocks[2])
			}
			if len(ipsets) != 2 {
				t.Fatalf("ipset calls %v, want one before and one after the commits", ipsets)
			}
			noep := noepSetName(m, IPv4)
			if !strings.Contains(ipsets[0].stdin, "add "+noep+" 10.96.0.10,udp:53\n") {
				t.Errorf("dns must be refused while it translates to nothing:\n%s", ipsets[0].stdin)
			}
			if !strings.Contains(ipsets[1].stdin, "del "+noep+" 10.96.0.10,udp:53\n") {
				t.Errorf("dns must be translated again once the commits are in force:\n%s", ipsets[1].stdin)
			}
			assertNoViolations(t, n)
			assertTranslatedView(t, n, m, next)
		})
	}
}

// TestServiceTransitionsAllowNothingNeitherStateAllows applies random
// changes of policy and Services (pods and their identities stay, so the
// sets' members do not move) and, at every step of each Apply (after the
// set updates, after each table's commit, at the end), sends a pod's new
// connection to every frontend: each backend it may reach must be one
// that the old state or the new one lets that pod reach through that
// frontend, and a frontend it reaches untranslated must be one that state
// leaves untranslated and allows.
func TestServiceTransitionsAllowNothingNeitherStateAllows(t *testing.T) {
	steps := 150
	if testing.Short() {
		steps = 40
	}
	for _, m := range []Mode{ModeNFT, ModeLegacy} {
		t.Run(m.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(m), 7))
			n := newFakeNode()
			d, err := New(Options{Mode: m, Runner: n, TranslateServices: true})
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range semIfs {
				if err := d.Attach(name); err != nil {
					t.Fatal(err)
				}
			}
			base := randomDesired(rng)
			old := base
			mustApply(t, d, old)
			checks, mixed := 0, 0
			for step := range steps {
				next := randomDesired(rng)
				next.Addrs, next.CIDRs = base.Addrs, base.CIDRs
				for name, ep := range next.Endpoints {
					cp := *ep
					cp.IPv4, cp.IPv6 = base.Endpoints[name].IPv4, base.Endpoints[name].IPv6
					next.Endpoints[name] = &cp
				}
				route := routeTo(base)
				// check runs on the goroutines of the commits too: it
				// records the first failure for the test to report.
				var mu sync.Mutex
				var failure string
				check := func(when string) {
					fail := func(format string, args ...any) {
						mu.Lock()
						defer mu.Unlock()
						if failure == "" {
							failure = fmt.Sprintf("step %d %s: ", step, when) + fmt.Sprintf(format, args...)
						}
					}
					for _, p := range serviceProbes(old, next) {
						got, err := n.evalPaths(m, p, route)
						if err != nil {
							fail("%v: %v", p, err)
							return
						}
						allowed := map[string]bool{}
						for _, s := range []*policy.Desired{old, next} {
							for _, r := range refPaths(s, p, route, iptablesDataplane) {
								if r.verdict == "ACCEPT" {
									allowed[r.to.String()] = true
								}
							}
						}
						for _, g := range got {
							if g.verdict == "ACCEPT" && !allowed[g.to.String()] {
								fail("%v reaches %v, which neither state allows\nold services: %s\nnew services: %s\nold endpoints: %s\nnew endpoints: %s",
									p, g.to, dumpServices(old), dumpServices(next), dumpEndpoints(old), dumpEndpoints(next))
							}
						}
						mu.Lock()
						checks++
						mu.Unlock()
					}
				}
				d.beforeRules = func() { check("after the set updates") }
				n.afterCommit = func(k tableKey) {
					mixed++
					n.mu.Unlock() // evalPaths takes it
					check("after a " + k.table + " commit of " + k.fam.String())
					n.mu.Lock()
				}
				mustApply(t, d, next)
				n.afterCommit, d.beforeRules = nil, nil
				check("at the end")
				if failure != "" {
					t.Fatal(failure)
				}
				assertNoViolations(t, n)
				old = next
			}
			if mixed < steps {
				t.Fatalf("only %d intermediate commits in %d steps: the test shows little", mixed, steps)
			}
			t.Logf("%d probes over %d intermediate commits", checks, mixed)
		})
	}
}

// serviceProbes are a new connection from each endpoint to each frontend
// of a and b.
func serviceProbes(a, b *policy.Desired) []testPacket {
	fronts := map[policy.ServiceFrontend]bool{}
	for _, d := range []*policy.Desired{a, b} {
		for fr := range d.Services {
			fronts[fr] = true
		}
	}
	var out []testPacket
	for _, fr := range sortedFrontends(fronts) {
		for _, name := range semIfs {
			ep := a.Endpoints[name]
			src := ep.IPv4
			if fr.Addr.Is6() {
				src = ep.IPv6
			}
			if !src.IsValid() {
				continue
			}
			out = append(out, testPacket{hook: "FORWARD", in: name, out: "eth0", src: src, dst: fr.Addr, proto: fr.Proto, dport: fr.Port})
		}
	}
	return out
}

// TestApplyServicesRefusalComesAndGoes: a dataplane that leaves
// translation to kube-proxy writes nothing in the nat table, and a node's
// Services all going away removes the refusal, its chain and sets.
func TestApplyServicesRefusalComesAndGoes(t *testing.T) {
	n := newFakeNode()
	with := svcState()
	without := svcState()
	without.Services = nil
	d := newTestDataplane(t, ModeLegacy, n, with)
	mustApply(t, d, with)
	v := n.view(ModeLegacy)
	if len(v.nat[0]) != 0 || len(v.natJumps[0]) != 0 {
		t.Errorf("nat chains without translation: %v %v", v.nat[0], v.natJumps[0])
	}
	if _, ok := v.sets["lockstep-legacy4-noep"]; !ok {
		t.Fatal("no set of frontends without backends")
	}
	mustApply(t, d, without)
	assertNoViolations(t, n)
	assertView(t, n, ModeLegacy, without)
	for name := range n.view(ModeLegacy).sets {
		if strings.HasSuffix(name, noepTag) {
			t.Errorf("set %s left", name)
		}
	}
}

// TestApplyRepairsServiceDrift: after Invalidate, Apply reads the nat
// table back too and repairs its Service chains and hooks, leaving the
// masquerade chain that lives there alone.
func TestApplyRepairsServiceDrift(t *testing.T) {
	want := svcState()
	masq := "*nat\n:LOCKSTEP-MASQ - [0:0]\n-A LOCKSTEP-MASQ -d 10.0.0.0/8 -j RETURN\n-I POSTROUTING 1 -m comment --comment \"lockstep: masquerade\" -j LOCKSTEP-MASQ\nCOMMIT\n"
	tests := []struct {
		name  string
		drift func(n *fakeNode)
	}{
		{"a backend's rule deleted", func(n *fakeNode) {
			t := n.tables[tableKey{ModeNFT, IPv4, "nat"}]
			t.chains[svcChainName(feWeb)] = t.chains[svcChainName(feWeb)][1:]
		}},
		{"the PREROUTING hook gone", func(n *fakeNode) {
			n.tables[tableKey{ModeNFT, IPv6, "nat"}].chains["PREROUTING"] = nil
		}},
		{"a stale Service chain with a jump", func(n *fakeNode) {
			t := n.tables[tableKey{ModeNFT, IPv4, "nat"}]
			t.chains["LOCKSTEP-SVC-STALE"] = []string{"-p tcp -j DNAT --to-destination 10.9.9.9:1"}
			t.chains[chainSvcAll] = append(t.chains[chainSvcAll], "-d 10.96.9.9/32 -p tcp -m tcp --dport 1 -j LOCKSTEP-SVC-STALE")
		}},
		{"a member of the refused set gone", func(n *fakeNode) {
			clear(n.sets["lockstep-nft4-noep"].frontends)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newFakeNode()
			for _, f := range families {
				seedRules(t, n, ModeNFT, f, masq)
			}
			d := newTestDataplane(t, ModeNFT, n, want)
			d.r.translate = true
			mustApply(t, d, want)
			masqBefore := slices.Clone(n.tables[tableKey{ModeNFT, IPv4, "nat"}].chains["LOCKSTEP-MASQ"])
			tt.drift(n)
			mustApply(t, d, want) // believes nothing changed
			fresh := newFakeNode()
			for _, f := range families {
				seedRules(t, fresh, ModeNFT, f, masq)
			}
			dd := newTestDataplane(t, ModeNFT, fresh, want)
			dd.r.translate = true
			mustApply(t, dd, want)
			if diffViews(n.view(ModeNFT), fresh.view(ModeNFT)) == "" {
				t.Fatal("the drift is invisible: the test proves nothing")
			}
			d.Invalidate()
			mustApply(t, d, want)
			if diff := diffViews(n.view(ModeNFT), fresh.view(ModeNFT)); diff != "" {
				t.Fatalf("not repaired:\n%s", diff)
			}
			nat := n.tables[tableKey{ModeNFT, IPv4, "nat"}]
			if !slices.Equal(nat.chains["LOCKSTEP-MASQ"], masqBefore) || !slices.ContainsFunc(nat.chains["POSTROUTING"], func(r string) bool { return strings.HasSuffix(r, "-j LOCKSTEP-MASQ") }) {
				t.Errorf("the masquerade chain or its jump changed: %q, POSTROUTING %q", nat.chains["LOCKSTEP-MASQ"], nat.chains["POSTROUTING"])
			}
			if pre := nat.chains["PREROUTING"]; len(pre) == 0 || !strings.HasSuffix(pre[0], "-j "+chainSvcPods) {
				t.Errorf("PREROUTING %q, want lockstep's jump first", pre)
			}
		})
	}
}

// TestCleanupRemovesServiceChains: the clean-up of a mode removes the
// Service chains, their hooks and the set of frontends without backends,
// keeps a chain the caller keeps, and ListLeftovers counts them.
func TestCleanupRemovesServiceChains(t *testing.T) {
	n := newFakeNode()
	masq := ChainRef{Family: IPv4, Table: "nat", Chain: "LOCKSTEP-MASQ"}
	seedRules(t, n, ModeLegacy, IPv4, "*nat\n:LOCKSTEP-MASQ - [0:0]\n-I POSTROUTING 1 -j LOCKSTEP-MASQ\nCOMMIT\n")
	want := svcState()
	d := newTestDataplane(t, ModeLegacy, n, want)
	d.r.translate = true
	mustApply(t, d, want)
	ctx := t.Context()
	l, err := ListLeftovers(ctx, n, ModeLegacy, masq)
	if err != nil {
		t.Fatal(err)
	}
	var natChains, natJumps int
	for _, c := range l.Chains {
		if c.Table == "nat" {
			natChains++
		}
	}
	for _, j := range l.Jumps {
		if j.Table == "nat" {
			natJumps++
		}
	}
	// Per family: PODS, ALL, HAIRPIN and a chain per translated frontend
	// (IPv4: web and dns; IPv6: web6); the PREROUTING and POSTROUTING hooks.
	if natChains != 5+4 || natJumps != 4 || !slices.Contains(l.Sets, "lockstep-legacy4-noep") {
		t.Fatalf("leftovers %s: %d nat chains, %d nat jumps, sets %v; want 9, 4 and the noep sets", l, natChains, natJumps, l.Sets)
	}
	if _, err := Purge(ctx, n, ModeLegacy, masq); err != nil {
		t.Fatal(err)
	}
	v := n.view(ModeLegacy)
	for i := range families {
		if len(v.nat[i])+len(v.natJumps[i])+len(v.chains[i]) != 0 {
			t.Errorf("left after Purge: %v %v %v", v.nat[i], v.natJumps[i], v.chains[i])
		}
	}
	if len(v.sets) != 0 {
		t.Errorf("sets left after Purge: %v", v.sets)
	}
	if _, ok := n.tables[tableKey{ModeLegacy, IPv4, "nat"}].chains["LOCKSTEP-MASQ"]; !ok {
		t.Error("Purge removed the kept masquerade chain")
	}
}

// TestRenderRejectsBadServices: a frontend or backend no rule can express
// fails the render with its Service's name.
func TestRenderRejectsBadServices(t *testing.T) {
	for _, tt := range []struct {
		name string
		fr   policy.ServiceFrontend
		e    *policy.ServiceEntry
	}{
		{"ICMP frontend", policy.ServiceFrontend{Addr: addr("10.96.0.1"), Port: 1, Proto: 1}, &policy.ServiceEntry{Service: "ns/bad"}},
		{"port 0", policy.ServiceFrontend{Addr: addr("10.96.0.1"), Proto: 6}, &policy.ServiceEntry{Service: "ns/bad"}},
		{"IPv6 backend of an IPv4 frontend", feWeb, &policy.ServiceEntry{Service: "ns/bad", Backends: []policy.ServiceBackend{{Addr: addr("fd00::5"), Port: 80}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := renderer{mode: ModeNFT, fams: []Family{IPv4, IPv6}, translate: true}
			_, _, err := r.render(withService(svcState(), tt.fr, tt.e), nil)
			if err == nil || !strings.Contains(err.Error(), "ns/bad") {
				t.Fatalf("render: %v, want an error naming ns/bad", err)
			}
		})
	}
}

func TestParseFrontend(t *testing.T) {
	for _, fr := range []policy.ServiceFrontend{feWeb, feDNS, feWeb6, {Addr: addr("fd96::1"), Port: 65535, Proto: policyapi.ProtoSCTP}} {
		got, err := parseFrontend(frontendText(fr))
		if err != nil || got != fr {
			t.Errorf("parseFrontend(%q) = %v, %v", frontendText(fr), got, err)
		}
	}
	for _, bad := range []string{"10.96.0.1", "10.96.0.1,icmp:1", "10.96.0.1,tcp", "x,tcp:1"} {
		if _, err := parseFrontend(bad); err == nil {
			t.Errorf("parseFrontend(%q) succeeded", bad)
		}
	}
}

func TestIntersectBackends(t *testing.T) {
	b := func(s ...string) []policy.ServiceBackend {
		var out []policy.ServiceBackend
		for _, x := range s {
			ap := netip.MustParseAddrPort(x)
			out = append(out, policy.ServiceBackend{Addr: ap.Addr(), Port: ap.Port()})
		}
		return out
	}
	for _, tc := range []struct {
		name string
		a, b []policy.ServiceBackend
		want []policy.ServiceBackend
	}{
		{"none", nil, b("10.0.0.1:80"), nil},
		{"the same", b("10.0.0.1:80", "10.0.0.2:80"), b("10.0.0.1:80", "10.0.0.2:80"), b("10.0.0.1:80", "10.0.0.2:80")},
		{"one left, one come", b("10.0.0.1:80", "10.0.0.2:80"), b("10.0.0.2:80", "10.0.0.3:80"), b("10.0.0.2:80")},
		{"ports differ", b("10.0.0.1:80", "10.0.0.1:81"), b("10.0.0.1:81", "10.0.0.2:80"), b("10.0.0.1:81")},
		{"interleaved", b("10.0.0.1:80", "10.0.0.3:80", "10.0.0.5:80"), b("10.0.0.2:80", "10.0.0.3:80", "10.0.0.4:80", "10.0.0.5:80"), b("10.0.0.3:80", "10.0.0.5:80")},
		{"IPv6 after IPv4", b("10.0.0.1:80", "[fd00::1]:80"), b("[fd00::1]:80"), b("[fd00::1]:80")},
	} {
		if got := intersectBackends(tc.a, tc.b); !slices.Equal(got, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
		if got := intersectBackends(tc.b, tc.a); !slices.Equal(got, tc.want) {
			t.Errorf("%s, the other way: %v, want %v", tc.name, got, tc.want)
		}
	}
}
