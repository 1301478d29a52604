package routes

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestDesired(t *testing.T) {
	pfx := netip.MustParsePrefix
	addr := netip.MustParseAddr
	tests := []struct {
		name         string
		peers        []Peer
		want         []Route
		wantProblems []string
	}{
		{name: "no peers", want: []Route{}},
		{
			name: "every block via the node's address of its family",
			peers: []Peer{
				{Node: "b", Addrs: []netip.Addr{addr("192.168.77.2"), addr("fd00:77::2")},
					Blocks: []netip.Prefix{pfx("10.244.1.0/26"), pfx("fd00:10:244:1::/120"), pfx("10.244.0.64/26")}},
				{Node: "c", Addrs: []netip.Addr{addr("192.168.77.3")}, Blocks: []netip.Prefix{pfx("10.244.2.0/26")}},
			},
			want: []Route{
				{Dst: pfx("10.244.0.64/26"), Via: addr("192.168.77.2"), Node: "b"},
				{Dst: pfx("10.244.1.0/26"), Via: addr("192.168.77.2"), Node: "b"},
				{Dst: pfx("10.244.2.0/26"), Via: addr("192.168.77.3"), Node: "c"},
				{Dst: pfx("fd00:10:244:1::/120"), Via: addr("fd00:77::2"), Node: "b"},
			},
		},
		{
			name:  "the first InternalIP of the family is the next hop; mapped addresses count as IPv4",
			peers: []Peer{{Node: "b", Addrs: []netip.Addr{addr("fd00:77::2"), addr("::ffff:192.168.77.2"), addr("192.168.77.20")}, Blocks: []netip.Prefix{pfx("10.244.1.0/26")}}},
			want:  []Route{{Dst: pfx("10.244.1.0/26"), Via: addr("192.168.77.2"), Node: "b"}},
		},
		{
			name:  "blocks are masked",
			peers: []Peer{{Node: "b", Addrs: []netip.Addr{addr("192.168.77.2")}, Blocks: []netip.Prefix{pfx("10.244.1.7/26")}}},
			want:  []Route{{Dst: pfx("10.244.1.0/26"), Via: addr("192.168.77.2"), Node: "b"}},
		},
		{
			name:         "no address of the block's family",
			peers:        []Peer{{Node: "b", Addrs: []netip.Addr{addr("192.168.77.2")}, Blocks: []netip.Prefix{pfx("fd00:10:244:1::/120"), pfx("10.244.1.0/26")}}},
			want:         []Route{{Dst: pfx("10.244.1.0/26"), Via: addr("192.168.77.2"), Node: "b"}},
			wantProblems: []string{"node b has no IPv6 InternalIP"},
		},
		{
			name: "a block two nodes claim is routed to neither",
			peers: []Peer{
				{Node: "c", Addrs: []netip.Addr{addr("192.168.77.3")}, Blocks: []netip.Prefix{pfx("10.244.1.0/26"), pfx("10.244.2.0/26")}},
				{Node: "b", Addrs: []netip.Addr{addr("192.168.77.2")}, Blocks: []netip.Prefix{pfx("10.244.1.0/26")}},
			},
			want:         []Route{{Dst: pfx("10.244.2.0/26"), Via: addr("192.168.77.3"), Node: "c"}},
			wantProblems: []string{"block 10.244.1.0/26 is assigned to nodes b, c"},
		},
		{
			name:  "a block a node lists twice is one route",
			peers: []Peer{{Node: "b", Addrs: []netip.Addr{addr("192.168.77.2")}, Blocks: []netip.Prefix{pfx("10.244.1.0/26"), pfx("10.244.1.0/26")}}},
			want:  []Route{{Dst: pfx("10.244.1.0/26"), Via: addr("192.168.77.2"), Node: "b"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, problems := Desired(tc.peers)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("routes:\n got %v\nwant %v", got, tc.want)
			}
			if len(problems) != len(tc.wantProblems) {
				t.Fatalf("problems = %q, want ones starting %q", problems, tc.wantProblems)
			}
			for i, w := range tc.wantProblems {
				if !strings.HasPrefix(problems[i], w) {
					t.Errorf("problem %d = %q, want it to start %q", i, problems[i], w)
				}
			}
		})
	}
}

// TestManagerAppliesOnlyAfterSetAndRetries: an agent that restarts keeps
// the routes it finds until the source has spoken, and a failed apply is
// retried without a new Set.
func TestManagerAppliesOnlyAfterSetAndRetries(t *testing.T) {
	calls := make(chan []Route, 10)
	fail := true
	m := NewManager(slog.New(slog.DiscardHandler))
	m.apply = func(r []Route) (Result, error) {
		calls <- r
		if fail {
			fail = false
			return Result{}, errors.New("netlink said no")
		}
		return Result{}, nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { m.Run(ctx, time.Hour); close(done) }()
	defer func() { cancel(); <-done }()

	// Wake the loop without a Set: it must not apply.
	m.wake <- struct{}{}
	want := []Route{{Dst: netip.MustParsePrefix("10.244.1.0/26"), Via: netip.MustParseAddr("192.168.77.2"), Node: "b"}}
	m.Set(want)
	for i, what := range []string{"first apply", "retry after failure"} {
		got := <-calls
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%s (call %d) applied %v, want %v", what, i, got, want)
		}
	}
}
