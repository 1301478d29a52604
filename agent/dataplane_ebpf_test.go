package agent

import (
	"bytes"
	"strings"
	"testing"

	"lockstep.dev/lockstep/agent/datapath"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// TestWritePolicyVerdicts checks lockstep_policy_verdicts_total's text
// across a policy update (its counts go on) and a delete (the datapath no
// longer reports the policy: its series are gone, the others' stay).
func TestWritePolicyVerdicts(t *testing.T) {
	t.Parallel()
	in, eg := policyapi.Ingress, policyapi.Egress
	steps := []struct {
		name    string
		vs      []datapath.PolicyVerdict
		want    []string
		notWant []string
	}{
		{
			name: "two policies",
			vs: []datapath.PolicyVerdict{
				{Namespace: "shop", Name: "db", Dir: in, Allowed: 3, Denied: 7},
				{Namespace: "shop", Name: "web", Dir: eg, Allowed: 1, Denied: 0},
			},
			want: []string{
				`lockstep_policy_verdicts_total{namespace="shop",policy="db",direction="ingress",verdict="allow"} 3`,
				`lockstep_policy_verdicts_total{namespace="shop",policy="db",direction="ingress",verdict="deny"} 7`,
				`lockstep_policy_verdicts_total{namespace="shop",policy="web",direction="egress",verdict="allow"} 1`,
				`lockstep_policy_verdicts_total{namespace="shop",policy="web",direction="egress",verdict="deny"} 0`,
			},
		},
		{
			name: "db updated",
			vs: []datapath.PolicyVerdict{
				{Namespace: "shop", Name: "db", Dir: in, Allowed: 5, Denied: 9},
				{Namespace: "shop", Name: "web", Dir: eg, Allowed: 1, Denied: 0},
			},
			want: []string{
				`lockstep_policy_verdicts_total{namespace="shop",policy="db",direction="ingress",verdict="allow"} 5`,
				`lockstep_policy_verdicts_total{namespace="shop",policy="db",direction="ingress",verdict="deny"} 9`,
			},
		},
		{
			name: "web deleted",
			vs: []datapath.PolicyVerdict{
				{Namespace: "shop", Name: "db", Dir: in, Allowed: 5, Denied: 9},
			},
			want: []string{
				`lockstep_policy_verdicts_total{namespace="shop",policy="db",direction="ingress",verdict="deny"} 9`,
			},
			notWant: []string{`policy="web"`},
		},
	}
	for _, s := range steps {
		var b bytes.Buffer
		writePolicyVerdicts(&b, s.vs)
		text := b.String()
		for _, line := range []string{"# HELP lockstep_policy_verdicts_total ", "# TYPE lockstep_policy_verdicts_total counter\n"} {
			if !strings.Contains(text, line) {
				t.Errorf("%s: no %q in\n%s", s.name, line, text)
			}
		}
		for _, w := range s.want {
			if !strings.Contains(text, w+"\n") {
				t.Errorf("%s: no line %q in\n%s", s.name, w, text)
			}
		}
		for _, nw := range s.notWant {
			if strings.Contains(text, nw) {
				t.Errorf("%s: %q still written:\n%s", s.name, nw, text)
			}
		}
		if got, want := strings.Count(text, "\nlockstep_policy_verdicts_total{"), 2*len(s.vs); got != want {
			t.Errorf("%s: %d samples, want %d (allow and deny per policy direction)", s.name, got, want)
		}
	}
}
