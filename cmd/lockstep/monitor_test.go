package main

import (
	"bytes"
	"strings"
	"testing"

	"lockstep.dev/lockstep/maps"
)

// Each verdict prints as itself: a refusal of a Service without a ready
// backend is neither an allow nor a plain drop.
func TestWriteEventVerdicts(t *testing.T) {
	for _, tc := range []struct {
		verdict uint8
		reason  maps.Reason
		want    string
	}{
		{maps.VerdictAllow, maps.ReasonAllowedNew, "ALLOW  allowed-new "},
		{maps.VerdictDrop, maps.ReasonPolicyEgress, "DROP   policy-egress "},
		{maps.VerdictReject, maps.ReasonServiceNoBackend, "REJECT service-no-backend "},
	} {
		var out bytes.Buffer
		writeEvent(&out, maps.Event{Verdict: tc.verdict, Reason: tc.reason, Proto: 6, Sport: 1, Dport: 80})
		if !strings.HasPrefix(out.String(), tc.want) {
			t.Errorf("verdict %d reason %s: %q, want it to start with %q", tc.verdict, tc.reason, out.String(), tc.want)
		}
	}
}
