//go:build linux

package datapath

import (
	"errors"
	"maps"
	"testing"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/test/testenv"
)

// An IPv4-mapped IPv6 prefix would be the key of an IPv4 one in
// lockstep_cidrs (::ffff:0.0.0.0/96 is 0.0.0.0/0), the class of every IPv4
// address depending on which was written last. Apply refuses it, and the
// state applied before stays enforced.
func TestPrivilegedApplyRefusesMappedPrefix(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	good := scenario(true, true)
	mustApply(t, d, good)
	allowed := packet{src: podV4, dst: "192.168.5.5", proto: policyapi.ProtoTCP, sport: 40000, dport: 443} // class 1
	denied := packet{src: podV4, dst: "172.16.0.1", proto: policyapi.ProtoTCP, sport: 40000, dport: 443}   // no class

	for _, mapped := range []string{"::ffff:0.0.0.0/96", "::ffff:172.16.0.0/108"} {
		t.Run(mapped, func(t *testing.T) {
			bad := *good
			bad.CIDRs = maps.Clone(good.CIDRs)
			bad.CIDRs[prefix(mapped)] = class1
			if err := d.Apply(&bad); !errors.Is(err, policyapi.ErrMappedPrefix) {
				t.Fatalf("Apply with %s = %v, want an error wrapping policy.ErrMappedPrefix", mapped, err)
			}
			d.flushCT(t)
			if got := run(t, d.fromPod, allowed); got != actOK {
				t.Errorf("after the refused Apply, %+v: got %s, want OK", allowed, actName(got))
			}
			if got := run(t, d.fromPod, denied); got != actShot {
				t.Errorf("after the refused Apply, %+v: got %s, want SHOT (class 1 must not reach IPv4)", denied, actName(got))
			}
		})
	}
}
