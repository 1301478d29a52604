package agent

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/iptables"
	"lockstep.dev/lockstep/agent/masquerade"
	"lockstep.dev/lockstep/agent/routes"
	"lockstep.dev/lockstep/agent/store"
)

// natRecorder is a node with empty tables that records what is restored.
type natRecorder struct {
	mu       sync.Mutex
	payloads []string
}

func (r *natRecorder) Run(_ context.Context, name string, _ []string, stdin []byte) ([]byte, error) {
	if strings.HasSuffix(name, "-restore") {
		r.mu.Lock()
		r.payloads = append(r.payloads, name+"\n"+string(stdin))
		r.mu.Unlock()
	}
	return nil, nil
}

func (r *natRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.payloads
	r.payloads = nil
	return p
}

func setPools(t *testing.T, st *store.Store, cidrs ...string) {
	t.Helper()
	txn := st.WriteTxn()
	defer txn.Abort()
	pools, _ := store.Pools(txn, nil)
	for _, p := range pools {
		if err := store.DeletePool(txn, p.Name); err != nil {
			t.Fatal(err)
		}
	}
	for i, c := range cidrs {
		if err := store.UpsertPool(txn, store.Pool{Name: "p" + string(rune('a'+i)), CIDR: netip.MustParsePrefix(c), Draining: i > 0}); err != nil {
			t.Fatal(err)
		}
	}
	txn.Commit()
}

// TestMasqFollowsPoolsAndPeers: the agent's masquerade feed programs the
// store's pools (draining ones too) and the other nodes' blocks, heard of
// before start; a new block is in the rules by the time setPeers returns,
// that is before the routes manager hears of it; a new pool follows.
func TestMasqFollowsPoolsAndPeers(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := store.New()
	if err != nil {
		t.Fatal(err)
	}
	setPools(t, st, "10.244.1.0/24")
	rec := &natRecorder{}
	m := newMasq(Config{Masquerade: true, NonMasqueradeCIDRs: []netip.Prefix{netip.MustParsePrefix("172.16.0.0/12")}}, slog.New(slog.DiscardHandler))
	m.run = rec
	m.setPeers([]routes.Peer{{Node: "b", Blocks: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24")}}})
	keep, err := m.open(ctx, &backend{name: "iptables-legacy"})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(keep["iptables-legacy"], masquerade.Chains()) || len(keep) != 1 {
		t.Fatalf("keep %v, want the masquerade chains for iptables-legacy only", keep)
	}
	if got := rec.take(); len(got) != 0 {
		t.Fatalf("wrote before start: %q", got)
	}
	if err := m.start(ctx, ctx, st); err != nil {
		t.Fatal(err)
	}
	wantIn := func(step string, payloads []string, lines ...string) {
		t.Helper()
		all := strings.Join(payloads, "\n")
		if !strings.HasPrefix(all, "iptables-legacy-restore") {
			t.Errorf("%s: not written with iptables-legacy-restore:\n%s", step, all)
		}
		for _, l := range lines {
			if !strings.Contains(all, l+"\n") {
				t.Errorf("%s: no %q in:\n%s", step, l, all)
			}
		}
	}
	wantIn("start", rec.take(),
		"-A LOCKSTEP-MASQ -d 10.244.2.0/24 -j RETURN",
		"-A LOCKSTEP-MASQ -d 172.16.0.0/12 -j RETURN",
		"-A LOCKSTEP-MASQ -s 10.244.1.0/24 -j MASQUERADE")

	m.setPeers([]routes.Peer{{Node: "b", Blocks: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24")}}, {Node: "c", Blocks: []netip.Prefix{netip.MustParsePrefix("10.244.3.0/24")}}})
	wantIn("new block", rec.take(), "-A LOCKSTEP-MASQ -d 10.244.3.0/24 -j RETURN")

	setPools(t, st, "10.244.1.0/24", "10.244.9.0/24")
	// The watcher syncs on its own goroutine (and the manager's Run may
	// sync again: the recorder's tables always read back empty).
	var got []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if got = append(got, rec.take()...); strings.Contains(strings.Join(got, ""), "10.244.9.0/24 -j MASQUERADE") {
			break
		}
	}
	wantIn("draining pool", got, "-A LOCKSTEP-MASQ -s 10.244.9.0/24 -j MASQUERADE")
}

// TestMasqOffRemovesFromBothModes: with masquerading off the agent keeps
// nothing, and removes the chain from whichever mode holds it.
func TestMasqOffRemovesFromBothModes(t *testing.T) {
	var calls []string
	run := runnerFunc(func(name string, args []string, stdin []byte) ([]byte, error) {
		calls = append(calls, strings.Join(append([]string{name}, args...), " "))
		if name == "ip6tables-legacy-save" {
			return []byte("*nat\n:POSTROUTING ACCEPT [0:0]\n:LOCKSTEP-MASQ - [0:0]\n-A POSTROUTING -j LOCKSTEP-MASQ\nCOMMIT\n"), nil
		}
		return nil, nil
	})
	m := newMasq(Config{}, slog.New(slog.DiscardHandler))
	m.run = run
	keep, err := m.open(context.Background(), &backend{name: backendEBPF})
	if err != nil || keep != nil {
		t.Fatalf("open: %v, %v; want nothing kept", keep, err)
	}
	want := []string{"iptables-nft-save", "ip6tables-nft-save", "iptables-legacy-save", "ip6tables-legacy-save", "ip6tables-legacy-restore -w 5 --noflush"}
	if !slices.Equal(calls, want) {
		t.Fatalf("calls %q, want %q", calls, want)
	}
	if err := m.start(context.Background(), context.Background(), nil); err != nil {
		t.Fatalf("start with masquerading off: %v", err)
	}
}

type runnerFunc func(name string, args []string, stdin []byte) ([]byte, error)

func (f runnerFunc) Run(_ context.Context, name string, args []string, stdin []byte) ([]byte, error) {
	return f(name, args, stdin)
}

var _ iptables.Runner = runnerFunc(nil)
