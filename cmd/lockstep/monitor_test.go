package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/api"
)

// A verdict prints with its pods and its rule by name, and a folded
// flow with its count.
func TestWriteVerdict(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.Local)
	for _, tc := range []struct {
		v    api.Verdict
		want string
	}{
		{api.Verdict{Time: at, Verdict: "drop", Dir: "ingress", Endpoint: "shop/web", Peer: `team/{"app":"client"}`, Proto: "tcp",
			Saddr: "10.0.0.2", Sport: 4000, Daddr: "10.0.0.1", Dport: 80, Rule: "default deny", Count: 1},
			`03:04:05 DROP   shop/web <- team/{"app":"client"} tcp 10.0.0.2:4000 -> 10.0.0.1:80 by default deny` + "\n"},
		{api.Verdict{Time: at, Verdict: "allow", Dir: "egress", Endpoint: "shop/web", Peer: "world", Proto: "udp",
			Saddr: "10.0.0.1", Sport: 5000, Daddr: "9.9.9.9", Dport: 53, Rule: "shop/dns egress[0]", Count: 7},
			"03:04:05 ALLOW  shop/web -> world udp 10.0.0.1:* -> 9.9.9.9:53 by shop/dns egress[0] x7\n"},
		{api.Verdict{Time: at, Verdict: "reject", Dir: "egress", Endpoint: "shop/web", Peer: "-", Proto: "tcp",
			Saddr: "10.0.0.1", Sport: 1, Daddr: "10.96.0.9", Dport: 80, Rule: "service without backend"},
			"03:04:05 REJECT shop/web -> - tcp 10.0.0.1:1 -> 10.96.0.9:80 by service without backend\n"},
	} {
		var out bytes.Buffer
		if err := writeVerdict(&out, tc.v); err != nil {
			t.Fatal(err)
		}
		if out.String() != tc.want {
			t.Errorf("got  %q\nwant %q", out.String(), tc.want)
		}
	}
}

func TestMonitorFlagsAreChecked(t *testing.T) {
	for _, args := range [][]string{
		{"--verdict", "deny"}, {"--pod", "web"}, {"--policy", "x"}, {"--interval", "-1s"},
	} {
		cmd := newMonitorCmd()
		cmd.SetArgs(append(args, "--socket", "/nonexistent/lockstep.sock"))
		cmd.SetOut(&bytes.Buffer{})
		cmd.SetErr(&bytes.Buffer{})
		err := cmd.Execute()
		if err == nil || !strings.Contains(err.Error(), "parse --") {
			t.Errorf("%v: %v, want a parse error", args, err)
		}
	}
}
