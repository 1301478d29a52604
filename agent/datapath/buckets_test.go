//go:build linux

package datapath

import (
	"math/rand/v2"
	"testing"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
)

// TestBucketedRulesAllowWhatTheRuleAllows checks the entries of random
// rules, read as bpf/lib/policy.h's rule_allows reads them, against the
// ranges, port by port: a bucketed rule allows exactly its ranges, no
// entry holds more ranges than a value does, and a rule of at most 16
// ranges stays one entry.
func TestBucketedRulesAllowWhatTheRuleAllows(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 16))
	k := policy.RuleKey{Peer: 300, Proto: policyapi.ProtoTCP}
	for round := range 300 {
		var rs []policy.PortRange
		next, n := 1+rng.IntN(50), rng.IntN(2000)
		if round%3 == 0 {
			n = rng.IntN(40)
		}
		for range n {
			lo := next + rng.IntN(3)
			if lo > 65535 {
				break
			}
			hi := lo
			if rng.IntN(4) == 0 {
				hi = min(65535, lo+rng.IntN(5000))
			}
			rs = append(rs, policy.PortRange{Lo: uint16(lo), Hi: uint16(hi)})
			next = hi + 2 // never adjacent
		}
		keys, vals, err := appendEntries(nil, nil, k, rs, 0)
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		entries := map[bpfmaps.PolicyKey]bpfmaps.PolicyValue{}
		for i, key := range keys {
			if vals[i].NRanges&0xffff > bpfmaps.MaxPortRanges {
				t.Fatalf("round %d: entry %+v holds %d ranges", round, key, vals[i].NRanges&0xffff)
			}
			entries[key] = vals[i]
		}
		if len(entries) != len(keys) {
			t.Fatalf("round %d: %d entries under %d keys", round, len(keys), len(entries))
		}
		if want := ruleEntries(map[policy.RuleKey][]policy.PortRange{k: rs}); want != len(keys) {
			t.Fatalf("round %d: ruleEntries %d, appendEntries made %d", round, want, len(keys))
		}
		if len(rs) <= bpfmaps.MaxPortRanges && len(keys) != 1 {
			t.Fatalf("round %d: %d ranges in %d entries, want one", round, len(rs), len(keys))
		}
		for port := range 65536 {
			if got, want := ruleAllows(entries, k, uint16(port)), rangesHold(rs, uint16(port)); got != want {
				t.Fatalf("round %d: %d ranges, port %d: entries allow %v, ranges %v", round, len(rs), port, got, want)
			}
		}
	}
}

// ruleAllows is bpf/lib/policy.h's rule_allows over entries.
func ruleAllows(entries map[bpfmaps.PolicyKey]bpfmaps.PolicyValue, k policy.RuleKey, dport uint16) bool {
	key := policyKey(k, 0)
	v, ok := entries[key]
	if !ok {
		return false
	}
	n := v.NRanges
	if n&bpfmaps.RuleBucketed != 0 {
		key.Chunk = uint16(1 + int(dport)>>(n>>16&0xf))
		if v, ok = entries[key]; !ok {
			return false
		}
		n = v.NRanges
	}
	for i := range min(int(n&0xffff), bpfmaps.MaxPortRanges) {
		if dport >= v.Ranges[i].Lo && dport <= v.Ranges[i].Hi {
			return true
		}
	}
	return false
}
