package main

import (
	"bytes"
	"strings"
	"testing"

	"lockstep.dev/lockstep/bpfmaps"
)

// Each verdict prints as itself: a refusal of a Service without a ready
// backend is neither an allow nor a plain drop.
func TestWriteEventVerdicts(t *testing.T) {
	for _, tc := range []struct {
		verdict uint8
		reason  bpfmaps.Reason
		want    string
	}{
		{bpfmaps.VerdictAllow, bpfmaps.ReasonAllowedNew, "ALLOW  allowed-new "},
		{bpfmaps.VerdictDrop, bpfmaps.ReasonPolicyEgress, "DROP   policy-egress "},
		{bpfmaps.VerdictReject, bpfmaps.ReasonServiceNoBackend, "REJECT service-no-backend "},
	} {
		var out bytes.Buffer
		writeEvent(&out, bpfmaps.Event{Verdict: tc.verdict, Reason: tc.reason, Proto: 6, Sport: 1, Dport: 80})
		if !strings.HasPrefix(out.String(), tc.want) {
			t.Errorf("verdict %d reason %s: %q, want it to start with %q", tc.verdict, tc.reason, out.String(), tc.want)
		}
	}
}
