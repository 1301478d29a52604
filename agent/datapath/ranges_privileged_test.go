//go:build linux

package datapath

import (
	"fmt"
	"testing"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/test/testenv"
)

// TestPrivilegedManyPortRanges: a rule with more port ranges than one map
// value holds (16) is split by port into buckets; every range allows, at
// both ends, and the gaps between them do not. The states follow each
// other so that a rule is bucketed, bucketed differently and not
// bucketed again, in place: an entry left behind by an earlier state
// would allow a port the later one does not.
func TestPrivilegedManyPortRanges(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	state := func(n int) *policy.Desired {
		want := scenario(true, true)
		var rs []policy.PortRange
		for i := range n {
			rs = append(rs, policy.PortRange{Lo: uint16(10000 + 10*i), Hi: uint16(10000 + 10*i + 1)})
		}
		if n > 100 { // wide ranges across bucket edges, then dense ones
			rs = rs[:0]
			for i := range 20 {
				rs = append(rs, policy.PortRange{Lo: uint16(1000 * (i + 1)), Hi: uint16(1000*(i+1) + 600)})
			}
			for i := range n - 20 {
				rs = append(rs, policy.PortRange{Lo: uint16(30000 + 2*i), Hi: uint16(30000 + 2*i)})
			}
		}
		want.Endpoints[podIf].Rules[policy.RuleKey{Peer: idWeb, Dir: policyapi.Ingress, Proto: policyapi.ProtoTCP}] = rs
		return want
	}
	in := func(port uint16) packet {
		return packet{src: "10.0.0.2", dst: podV4, proto: policyapi.ProtoTCP, sport: 40000, dport: port}
	}
	for _, n := range []int{16, 17, 40, 3, 300, 16, 33, 300, 2} {
		t.Run(fmt.Sprint(n, " ranges"), func(t *testing.T) {
			mustApply(t, d, state(n))
			mustApply(t, d, state(n)) // both parities hold it
			var cases []verdictCase
			if n > 100 {
				for _, port := range []uint16{1000, 1600, 1601, 999, 20000, 20600, 20601, 30000, 30001, 30000 + 2*uint16(n-21), 30000 + 2*uint16(n-20), 10000, 10001} {
					want := uint32(actShot)
					if rangesHold(state(n).Endpoints[podIf].Rules[policy.RuleKey{Peer: idWeb, Dir: policyapi.Ingress, Proto: policyapi.ProtoTCP}], port) {
						want = actOK
					}
					cases = append(cases, verdictCase{fmt.Sprint("port ", port), policyapi.Ingress, in(port), want})
				}
				checkVerdicts(t, d, cases)
				return
			}
			for i := range n + 2 {
				want := uint32(actOK)
				if i >= n {
					want = actShot
				}
				lo := uint16(10000 + 10*i)
				cases = append(cases,
					verdictCase{fmt.Sprintf("range %d low end", i), policyapi.Ingress, in(lo), want},
					verdictCase{fmt.Sprintf("range %d high end", i), policyapi.Ingress, in(lo + 1), want},
					verdictCase{fmt.Sprintf("gap after range %d", i), policyapi.Ingress, in(lo + 5), actShot})
			}
			checkVerdicts(t, d, cases)
		})
	}
	if _, _, err := appendEntries(nil, nil, policy.RuleKey{}, make([]policy.PortRange, policy.MaxPortRanges+1), 0); err == nil {
		t.Errorf("a rule of %d ranges: no error, want %v", policy.MaxPortRanges+1, ErrTooManyRanges)
	}
}

func rangesHold(rs []policy.PortRange, port uint16) bool {
	for _, r := range rs {
		if port >= r.Lo && port <= r.Hi {
			return true
		}
	}
	return false
}
