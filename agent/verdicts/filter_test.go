package verdicts

import (
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/api"
)

func TestFilterMatch(t *testing.T) {
	v := api.Verdict{Verdict: "drop", Endpoint: "shop/web", Peer: `team/{"app":"client"}`, Rule: "default deny"}
	allowed := api.Verdict{Verdict: "allow", Endpoint: "shop/web", Peer: "world", Rule: "shop/allow-web ingress[0]", Policy: "shop/allow-web"}
	for _, tc := range []struct {
		name string
		f    Filter
		v    api.Verdict
		want bool
	}{
		{"empty", Filter{}, v, true},
		{"pod is the endpoint", Filter{Pod: "shop/web"}, v, true},
		{"other pod", Filter{Pod: "shop/db"}, v, false},
		{"namespace of the endpoint", Filter{Namespace: "shop"}, v, true},
		{"namespace of the peer", Filter{Namespace: "team"}, v, true},
		{"other namespace", Filter{Namespace: "prod"}, v, false},
		{"world has no namespace", Filter{Namespace: "world"}, allowed, false},
		{"verdict", Filter{Verdict: "drop"}, v, true},
		{"other verdict", Filter{Verdict: "allow"}, v, false},
		{"policy", Filter{Policy: "shop/allow-web"}, allowed, true},
		{"policy of a default deny", Filter{Policy: "shop/allow-web"}, v, false},
		{"all at once", Filter{Pod: "shop/web", Namespace: "shop", Verdict: "allow", Policy: "shop/allow-web"}, allowed, true},
	} {
		if got := tc.f.Match(tc.v); got != tc.want {
			t.Errorf("%s: Match = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestFilterValidate(t *testing.T) {
	for _, tc := range []struct {
		f  Filter
		ok bool
	}{
		{Filter{}, true},
		{Filter{Pod: "shop/web", Verdict: "reject", Policy: "shop/p"}, true},
		{Filter{Pod: "web"}, false},
		{Filter{Policy: "a/b/c"}, false},
		{Filter{Verdict: "deny"}, false},
	} {
		if err := tc.f.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%+v) = %v, want ok %v", tc.f, err, tc.ok)
		}
	}
}

// Repeats of a flow within the interval fold into one line with a count,
// whatever their source port; a different destination port, verdict or
// rule is another flow; interval 0 passes every event.
func TestAggregator(t *testing.T) {
	t0 := time.Unix(1000, 0)
	flow := func(sport, dport uint16, verdict string, at time.Duration) api.Verdict {
		return api.Verdict{Time: t0.Add(at), Verdict: verdict, Dir: "egress", Endpoint: "shop/web", Peer: "world",
			Proto: "tcp", Saddr: "10.0.0.1", Sport: sport, Daddr: "1.1.1.1", Dport: dport, Rule: "default deny"}
	}
	a := NewAggregator(time.Second)
	for i, v := range []api.Verdict{
		flow(1000, 443, "drop", 0), flow(1001, 443, "drop", 100*time.Millisecond), flow(1002, 80, "drop", 200*time.Millisecond),
		flow(1003, 443, "drop", 300*time.Millisecond), flow(1004, 443, "allow", 400*time.Millisecond),
	} {
		if out := a.Add(v); out != nil {
			t.Fatalf("Add %d returned %v before the interval", i, out)
		}
	}
	if a.Due(t0.Add(999 * time.Millisecond)) {
		t.Error("due before the interval is over")
	}
	if !a.Due(t0.Add(time.Second)) {
		t.Error("not due when the interval is over")
	}
	got := a.Flush()
	want := []struct {
		dport   uint16
		verdict string
		count   int
	}{{443, "drop", 3}, {80, "drop", 1}, {443, "allow", 1}}
	if len(got) != len(want) {
		t.Fatalf("flushed %d flows, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].Dport != w.dport || got[i].Verdict != w.verdict || got[i].Count != w.count {
			t.Errorf("flow %d: %d %s x%d, want %d %s x%d", i, got[i].Dport, got[i].Verdict, got[i].Count, w.dport, w.verdict, w.count)
		}
	}
	if got[0].Time != t0 {
		t.Errorf("a folded flow has the time of its first event: %v, want %v", got[0].Time, t0)
	}
	if len(a.Flush()) != 0 || a.Due(t0.Add(time.Hour)) {
		t.Error("flows kept after Flush")
	}

	each := NewAggregator(0)
	for range 2 {
		if out := each.Add(flow(1, 443, "drop", 0)); len(out) != 1 || out[0].Count != 1 {
			t.Errorf("interval 0: Add returned %+v, want the verdict itself", out)
		}
	}
}
