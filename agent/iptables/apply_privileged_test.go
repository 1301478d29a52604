//go:build linux

package iptables

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

var bothModes = []Mode{ModeNFT, ModeLegacy}

// TestPrivilegedApplyMatchesSaveOutput applies a sequence of states with
// the real tools of each mode in a throwaway namespace. After every Apply,
// iptables-save and ipset save must show exactly what the fake node holds
// for the same state: every lockstep chain rule for rule (so the rendering
// is the tools' canonical form), the jumps, and every set member. Purge
// then leaves nothing.
func TestPrivilegedApplyMatchesSaveOutput(t *testing.T) {
	requireTools(t)
	for _, m := range bothModes {
		t.Run(m.String(), func(t *testing.T) {
			r := nsRunner{newNetns(t)}
			d, err := New(Options{Mode: m, Runner: r})
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(11, uint64(m)))
			states := []*policy.Desired{twoPods(300), twoPods(301), manyEndpoints(20, 0), manyEndpoints(20, 1), manyEndpoints(17, 1)}
			for range 10 {
				states = append(states, randomDesired(rng))
			}
			states = append(states, twoPods(300))
			for i, want := range states {
				attachAll(t, d, want)
				mustApply(t, d, want)
				assertRealView(t, r, m, expectedView(t, m, want))
				if i == len(states)/2 {
					d.Invalidate() // one full reconcile against the real tables
				}
			}
			if s := d.Stats(); s.Failures != 0 || s.FullReconciles != 2 {
				t.Errorf("stats %+v, want no failures and 2 full reconciles", s)
			}
			if _, err := Purge(context.Background(), r, m); err != nil {
				t.Fatalf("Purge: %v", err)
			}
			assertClean(t, r)
		})
	}
}

// TestPrivilegedApplyRemovesEarlierOutputHook: the real tools of each
// mode, on a node an earlier version left with its OUTPUT hook (a
// LOCKSTEP-OUTPUT chain jumped to from OUTPUT, jumping to the ingress
// chains), show neither the chain nor the jump after a new Dataplane's
// first Apply, and Purge leaves nothing.
func TestPrivilegedApplyRemovesEarlierOutputHook(t *testing.T) {
	requireTools(t)
	for _, m := range bothModes {
		t.Run(m.String(), func(t *testing.T) {
			r := nsRunner{newNetns(t)}
			want := twoPods(300)
			mustApply(t, newTestDataplane(t, m, r, want), want)
			for _, f := range families {
				if _, err := r.Run(context.Background(), m.RestoreTool(f), restoreArgs, []byte(earlierOutputHook("ls-a"))); err != nil {
					t.Fatalf("seed the earlier OUTPUT hook: %v", err)
				}
			}
			if diffViews(realView(t, r, m), expectedView(t, m, want)) == "" {
				t.Fatal("the earlier hook is invisible: the test proves nothing")
			}
			mustApply(t, newTestDataplane(t, m, r, want), want)
			assertRealView(t, r, m, expectedView(t, m, want))
			v := realView(t, r, m)
			for _, f := range families {
				if _, ok := v.chains[f.index()]["LOCKSTEP-OUTPUT"]; ok {
					t.Errorf("%s: LOCKSTEP-OUTPUT still there", f)
				}
				for _, j := range v.jumps[f.index()] {
					if strings.HasPrefix(j, "OUTPUT ") {
						t.Errorf("%s: a jump from OUTPUT still there: %s", f, j)
					}
				}
			}
			if _, err := Purge(context.Background(), r, m); err != nil {
				t.Fatalf("Purge: %v", err)
			}
			assertClean(t, r)
		})
	}
}

// TestPrivilegedNetSetsMatchLPM asks the kernel (ipset test) whether each
// address is in each CIDR class set, and compares with the eBPF
// dataplane's lookup: the class of a pod address is its AddrEntry's,
// anything else's that of its longest prefix. This is where nomatch
// entries must make ipBlock excepts exact.
func TestPrivilegedNetSetsMatchLPM(t *testing.T) {
	requireTools(t)
	r := nsRunner{newNetns(t)}
	d, err := New(Options{Mode: ModeNFT, Runner: r})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 5))
	checked := 0
	for range 4 {
		want := randomDesired(rng)
		// Make every class referenced, so every class has its sets.
		ep := want.Endpoints["ep0"]
		for _, c := range semClasses[1:] {
			ep.Rules[policy.RuleKey{Peer: c, Dir: policyapi.Ingress, Proto: policyapi.ProtoTCP}] = ports(1, 1)
		}
		attachAll(t, d, want)
		mustApply(t, d, want)
		idx := newCIDRIndex(want.CIDRs)
		var pool []netip.Addr
		for a := range want.Addrs {
			pool = append(pool, a)
		}
		for _, s := range semExtraAddrs {
			pool = append(pool, addr(s))
		}
		for _, a := range pool {
			class := idx.lookup(a)
			if e, ok := want.Addrs[a]; ok {
				class = e.CIDRClass
			}
			for _, c := range semClasses[1:] {
				name, _ := setName(ModeNFT, familyOf(a), c)
				_, err := r.Run(context.Background(), ipsetTool, []string{"test", name, a.String()}, nil)
				var ee *ExitError
				if err != nil && !errors.As(err, &ee) {
					t.Fatal(err)
				}
				if in := err == nil; in != (class == c) {
					t.Fatalf("%s in %s: kernel says %v, want %v (address class %#x)\ncidrs: %v", a, name, in, class == c, uint32(class), want.CIDRs)
				}
				checked++
			}
		}
	}
	t.Logf("%d address/set pairs agree with the LPM lookup", checked)
}

// TestPrivilegedDetect: Detect picks the mode that holds the node's rules.
func TestPrivilegedDetect(t *testing.T) {
	requireTools(t)
	kube := []byte("*filter\n:KUBE-FORWARD - [0:0]\n-A FORWARD -j KUBE-FORWARD\n-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP\nCOMMIT\n")
	hint := []byte("*mangle\n:KUBE-IPTABLES-HINT - [0:0]\nCOMMIT\n")
	tests := []struct {
		name string
		seed map[string][]byte // restore tool -> payload
		want Mode
	}{
		{"empty namespace", nil, ModeNFT},
		{"rules in legacy", map[string][]byte{"iptables-legacy-restore": kube}, ModeLegacy},
		{"rules in nft", map[string][]byte{"ip6tables-nft-restore": kube}, ModeNFT},
		{"kubelet hint in nft, rules in legacy", map[string][]byte{"iptables-nft-restore": hint, "iptables-legacy-restore": kube}, ModeNFT},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := nsRunner{newNetns(t)}
			for tool, payload := range tt.seed {
				if _, err := r.Run(context.Background(), tool, restoreArgs, payload); err != nil {
					t.Fatal(err)
				}
			}
			got, err := Detect(context.Background(), r)
			if err != nil || got != tt.want {
				t.Fatalf("Detect = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}
