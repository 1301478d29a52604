package masquerade

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/iptables"
)

const ourJump = `-A POSTROUTING -m comment --comment "lockstep: masquerade pod traffic leaving the cluster" -j LOCKSTEP-MASQ`

var dualStack = Config{
	Sources:       prefixes("10.244.1.0/24", "fd00:10:244:1::/64"),
	Cluster:       prefixes("10.244.0.0/16", "fd00:10:244::/48"),
	NonMasquerade: prefixes("192.168.0.0/16"),
}

// kubeProxy is a POSTROUTING that already has kube-proxy's jump.
const kubeProxy = "*nat\n:KUBE-POSTROUTING - [0:0]\n-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING\n-A KUBE-POSTROUTING -j RETURN\nCOMMIT\n"

// restores returns the restore commands among calls.
func restores(calls []string) []string {
	return slices.DeleteFunc(slices.Clone(calls), func(c string) bool { return !strings.Contains(c, "-restore") })
}

// assertSynced checks that mode m's nat tables hold exactly c's rules and
// one jump, after kube-proxy's IPv4 rule when it was there first.
func assertSynced(t *testing.T, n *fakeNAT, m iptables.Mode, c Config, kubeFirst bool) {
	t.Helper()
	for _, f := range families {
		rules, exists := n.chain(m, f, ChainName)
		want := Rules(c, f)
		if want == nil {
			if exists {
				t.Errorf("%s: chain exists with %q; want none", f, rules)
			}
			continue
		}
		if !slices.Equal(rules, want) {
			t.Errorf("%s rules:\n%s\nwant:\n%s", f, strings.Join(rules, "\n"), strings.Join(want, "\n"))
		}
		post, _ := n.chain(m, f, "POSTROUTING")
		var jumps []string
		for _, r := range post {
			if strings.HasSuffix(r, ChainName) {
				jumps = append(jumps, r)
			}
		}
		if !slices.Equal(jumps, []string{ourJump}) {
			t.Errorf("%s jumps %q, want exactly ours", f, jumps)
		}
		if kubeFirst && f == iptables.IPv4 && !strings.Contains(post[0], "KUBE-POSTROUTING") {
			t.Errorf("%s: kube-proxy's jump no longer first: %q", f, post)
		}
	}
}

// TestSyncRepairsDrift: whatever state the chain is in, Sync brings it to
// the configuration in one commit per family that differs, never touching
// other rules, and a second Sync only reads.
func TestSyncRepairsDrift(t *testing.T) {
	v4 := iptables.IPv4
	tests := []struct {
		name      string
		seed      func(n *fakeNAT, m iptables.Mode)
		c         Config
		kubeFirst bool
		changes   []string // Change.String()s of the repairing Sync
	}{
		{"fresh node", func(*fakeNAT, iptables.Mode) {}, dualStack, false,
			[]string{"IPv4 installed (3 rules)", "IPv6 installed (2 rules)"}},
		{"IPv4 only: no IPv6 chain", func(*fakeNAT, iptables.Mode) {},
			Config{Sources: prefixes("10.244.1.0/24")}, false, []string{"IPv4 installed (2 rules)"}},
		{"in sync already", func(n *fakeNAT, m iptables.Mode) {
			_, _ = Sync(context.Background(), n, m, dualStack)
		}, dualStack, false, nil},
		{"jump deleted behind our back", func(n *fakeNAT, m iptables.Mode) {
			_, _ = Sync(context.Background(), n, m, dualStack)
			n.seed(m, v4, "*nat\n-D"+strings.TrimPrefix(ourJump, "-A")+"\nCOMMIT\n")
		}, dualStack, false, []string{"IPv4 updated (3 rules)"}},
		{"chain flushed", func(n *fakeNAT, m iptables.Mode) {
			_, _ = Sync(context.Background(), n, m, dualStack)
			n.seed(m, iptables.IPv6, "*nat\n:LOCKSTEP-MASQ - [0:0]\nCOMMIT\n")
		}, dualStack, false, []string{"IPv6 updated (2 rules)"}},
		{"a rule added to the chain", func(n *fakeNAT, m iptables.Mode) {
			_, _ = Sync(context.Background(), n, m, dualStack)
			n.seed(m, v4, "*nat\n-A LOCKSTEP-MASQ -j MASQUERADE\nCOMMIT\n")
		}, dualStack, false, []string{"IPv4 updated (3 rules)"}},
		{"a second jump", func(n *fakeNAT, m iptables.Mode) {
			_, _ = Sync(context.Background(), n, m, dualStack)
			n.seed(m, v4, "*nat\n"+ourJump+"\nCOMMIT\n")
		}, dualStack, false, []string{"IPv4 updated (3 rules)"}},
		{"kube-proxy was first and stays first", func(n *fakeNAT, m iptables.Mode) {
			_, _ = Sync(context.Background(), n, m, dualStack)
			n.seed(m, v4, strings.Replace(kubeProxy, "-A POSTROUTING", "-I POSTROUTING 1", 1))
			n.seed(m, v4, "*nat\n-A LOCKSTEP-MASQ -s 10.0.0.0/8 -j MASQUERADE\nCOMMIT\n")
		}, dualStack, true, []string{"IPv4 updated (3 rules)"}},
		{"pools changed", func(n *fakeNAT, m iptables.Mode) {
			_, _ = Sync(context.Background(), n, m, Config{Sources: prefixes("10.244.1.0/24", "fd00:10:244:1::/64")})
		}, dualStack, false, []string{"IPv4 updated (3 rules)", "IPv6 updated (2 rules)"}},
		{"IPv6 pool gone", func(n *fakeNAT, m iptables.Mode) {
			_, _ = Sync(context.Background(), n, m, dualStack)
		}, Config{Sources: prefixes("10.244.1.0/24"), Cluster: dualStack.Cluster, NonMasquerade: dualStack.NonMasquerade}, false,
			[]string{"IPv6 removed"}},
	}
	for _, m := range []iptables.Mode{iptables.ModeNFT, iptables.ModeLegacy} {
		for _, tt := range tests {
			t.Run(m.String()+"/"+tt.name, func(t *testing.T) {
				n := newFakeNAT()
				tt.seed(n, m)
				n.takeCalls()
				changes, err := Sync(context.Background(), n, m, tt.c)
				if err != nil {
					t.Fatal(err)
				}
				var got []string
				for _, c := range changes {
					got = append(got, c.String())
				}
				if !slices.Equal(got, tt.changes) {
					t.Errorf("changes %q, want %q", got, tt.changes)
				}
				calls := n.takeCalls()
				if len(restores(calls)) != len(tt.changes) {
					t.Errorf("%d restores for %d changed families: %q", len(restores(calls)), len(tt.changes), calls)
				}
				for _, c := range calls {
					if !strings.Contains(c, "-"+strings.TrimPrefix(m.String(), "iptables-")+"-") {
						t.Errorf("ran %q, not a tool of %s", c, m)
					}
				}
				assertSynced(t, n, m, tt.c, tt.kubeFirst)
				if again, err := Sync(context.Background(), n, m, tt.c); err != nil || len(again) > 0 {
					t.Errorf("second Sync: %v, %v; want no change", again, err)
				}
				if calls := restores(n.takeCalls()); len(calls) > 0 {
					t.Errorf("second Sync wrote: %q", calls)
				}
			})
		}
	}
}

// TestSyncReadsNATOnlyWhereItWrites: a family without pools is read
// without naming the nat table, which legacy's iptables-save would create.
func TestSyncReadsNATOnlyWhereItWrites(t *testing.T) {
	n := newFakeNAT()
	if _, err := Sync(context.Background(), n, iptables.ModeLegacy, Config{Sources: prefixes("10.244.1.0/24")}); err != nil {
		t.Fatal(err)
	}
	want := []string{"iptables-legacy-save -t nat", "iptables-legacy-restore -w 5 --noflush", "ip6tables-legacy-save"}
	if calls := n.takeCalls(); !slices.Equal(calls, want) {
		t.Fatalf("calls %q, want %q", calls, want)
	}
	if _, ok := n.tables[tableKey{iptables.ModeLegacy, iptables.IPv6}]; ok {
		t.Fatal("the IPv6 nat table was created on a node without IPv6 pools")
	}
}

// TestRemoveLeavesOthersRules: Remove takes the chain and its jump out of
// both families, leaves kube-proxy's rules and the other mode alone, and
// is idempotent.
func TestRemoveLeavesOthersRules(t *testing.T) {
	ctx := context.Background()
	n := newFakeNAT()
	for _, m := range []iptables.Mode{iptables.ModeNFT, iptables.ModeLegacy} {
		for _, f := range families {
			n.seed(m, f, kubeProxy)
		}
		if _, err := Sync(ctx, n, m, dualStack); err != nil {
			t.Fatal(err)
		}
	}
	changes, err := Remove(ctx, n, iptables.ModeLegacy)
	if err != nil || len(changes) != 2 {
		t.Fatalf("Remove: %v, %v; want both families removed", changes, err)
	}
	for _, f := range families {
		if rules, ok := n.chain(iptables.ModeLegacy, f, ChainName); ok {
			t.Errorf("legacy %s: chain left: %q", f, rules)
		}
		post, _ := n.chain(iptables.ModeLegacy, f, "POSTROUTING")
		kube, _ := n.chain(iptables.ModeLegacy, f, "KUBE-POSTROUTING")
		if len(post) != 1 || !strings.Contains(post[0], "KUBE-POSTROUTING") || len(kube) != 1 {
			t.Errorf("legacy %s: kube-proxy's rules changed: %q %q", f, post, kube)
		}
	}
	assertSynced(t, n, iptables.ModeNFT, dualStack, false)
	n.takeCalls()
	if again, err := Remove(ctx, n, iptables.ModeLegacy); err != nil || len(again) > 0 {
		t.Fatalf("second Remove: %v, %v", again, err)
	}
	if calls := n.takeCalls(); len(restores(calls)) > 0 || slices.Contains(calls, "iptables-legacy-save -t nat") {
		t.Fatalf("second Remove wrote, or named the nat table: %q", calls)
	}
}

// TestSyncFailureNamesFamilyAndMode: a failed commit changes nothing,
// says which family and mode, and the other family is still synced.
func TestSyncFailureNamesFamilyAndMode(t *testing.T) {
	n := newFakeNAT()
	n.fail = func(call string) bool { return strings.HasPrefix(call, "ip6tables-nft-restore") }
	changes, err := Sync(context.Background(), n, iptables.ModeNFT, dualStack)
	if err == nil || !strings.Contains(err.Error(), "write IPv6 masquerade rules in iptables-nft") || !strings.Contains(err.Error(), "xtables lock") {
		t.Fatalf("error %v; want the family, the mode and the tool's message", err)
	}
	if len(changes) != 1 || changes[0].Family != iptables.IPv4 {
		t.Fatalf("changes %v; want IPv4 installed despite IPv6 failing", changes)
	}
	if _, ok := n.chain(iptables.ModeNFT, iptables.IPv6, ChainName); ok {
		t.Fatal("a failed commit left an IPv6 chain")
	}
	n.fail = nil
	if _, err := Sync(context.Background(), n, iptables.ModeNFT, dualStack); err != nil {
		t.Fatal(err)
	}
	assertSynced(t, n, iptables.ModeNFT, dualStack, false)
}

// TestManagerRetriesAndResyncs: the Manager applies a Set at once, retries
// a failed sync, and repairs drift on its resync tick.
func TestManagerRetriesAndResyncs(t *testing.T) {
	n := newFakeNAT()
	failures := 2
	n.fail = func(call string) bool {
		if strings.Contains(call, "-restore") && failures > 0 {
			failures--
			return true
		}
		return false
	}
	m := NewManager(n, iptables.ModeNFT, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan struct{})
	go func() { m.Run(ctx, 100*time.Millisecond); close(done) }()
	if !m.Set(dualStack) {
		t.Fatal("Set of a new config reported no change")
	}
	if m.Set(Config{Sources: dualStack.Sources, Cluster: append(dualStack.Cluster, prefixes("10.244.7.0/24")...), NonMasquerade: dualStack.NonMasquerade}) {
		t.Fatal("Set of an equal config (an extra block inside a cluster CIDR) reported a change")
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within 10s", what)
			}
		}
	}
	synced := func() bool {
		for _, f := range families {
			if rules, _ := n.chain(iptables.ModeNFT, f, ChainName); !slices.Equal(rules, Rules(dualStack, f)) {
				return false
			}
		}
		return true
	}
	waitFor("rules installed after two failed commits", synced)
	n.seed(iptables.ModeNFT, iptables.IPv4, "*nat\n:LOCKSTEP-MASQ - [0:0]\nCOMMIT\n")
	waitFor("the flushed chain refilled by the resync", synced)
	cancel()
	<-done
}
