package iptables

import (
	"crypto/sha256"
	"encoding/base32"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// A ref is what one rule matches the remote end against: the set of one
// peer, or the union set of several pod identities.
type ref struct {
	peer policyapi.Peer
	// union, when set, lists the identities of a union set in ascending
	// order ("300,301,517"); peer is then unused.
	union string
}

// Union sets. An endpoint's rules in one direction that allow the same
// protocol and ports from different pod identities differ only in the set
// they match, so they become one rule matching a hash:ip set of all those
// identities' addresses:
//
//	lockstep-nft4-u-0q3v8d1k5m2a   pods of identities 300, 301 and 517
//
// A union set is named after its identity list (12 base32 digits of its
// SHA-256), so endpoints allowing the same identities share it, and it
// follows the lifecycle of every other set: created (or updated) before
// the commit that first references it, destroyed after the commit that
// drops its last reference. "Allow DNS to every namespace" is one rule per
// endpoint instead of one per identity in the cluster, which is what keeps
// the rule count, the commit time and the kernel's per-set lookups
// (iptables-restore resolves every --match-set by name) small.
const unionTag = "u-"

// unionHashLen is how many base32 digits of the hash a union set name
// keeps: lockstep-legacy6-u- plus 12 is ipset's 31 characters.
const unionHashLen = 12

var unionEncoding = base32.HexEncoding.WithPadding(base32.NoPadding)

// unionSetName is the name of the union set of the identities in union.
func unionSetName(m Mode, f Family, union string) string {
	return setPrefix(m, f) + unionTag + shortHash(union)
}

// shortHash is unionHashLen base32 digits (lower case) of the SHA-256 of
// s: the part of a union set's name, a Service chain's and an affinity
// list's that tells them apart.
func shortHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return strings.ToLower(unionEncoding.EncodeToString(sum[:unionHashLen*5/8+1]))[:unionHashLen]
}

// refSetName is the set a rule for rf matches in family f, and whether
// there is one (see setName).
func (r *renderer) refSetName(f Family, rf ref) (string, bool) {
	if rf.union == "" {
		return setName(r.mode, f, rf.peer)
	}
	h, ok := r.unionHashes[rf.union]
	if !ok {
		h = shortHash(rf.union)
	}
	return setPrefix(r.mode, f) + unionTag + h, true
}

// unionIdentities parses a ref's union back into its identities.
func unionIdentities(union string) []policyapi.Peer {
	fields := strings.Split(union, ",")
	out := make([]policyapi.Peer, 0, len(fields))
	for _, s := range fields {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			panic(fmt.Sprintf("iptables: bad union %q", union)) // built by groupUnions only
		}
		out = append(out, policyapi.Peer(n))
	}
	return out
}

// isIdentity reports whether peer is a pod identity (hash:ip set of its
// pods), the only peers a union set holds.
func isIdentity(peer policyapi.Peer) bool {
	return peer&policyapi.CIDRClassBit == 0 && peer >= policyapi.FirstPodIdentity
}

// groupUnions finds the rules of ep (keys in rule order) that share a
// direction, protocol and port ranges with rules for other identities.
// For each such group it returns the union in first, keyed by the group's
// first rule, and marks the other rules in merged: they are rendered as
// part of the first.
func groupUnions(keys []policy.RuleKey, rules map[policy.RuleKey][]policy.PortRange) (first map[policy.RuleKey]string, merged map[policy.RuleKey]bool) {
	type groupKey struct {
		dir   policyapi.Direction
		proto uint8
		ports string
	}
	groups := map[groupKey][]policy.RuleKey{}
	var order []groupKey
	for _, k := range keys {
		if !isIdentity(k.Peer) || len(rules[k]) == 0 {
			continue
		}
		g := groupKey{k.Dir, k.Proto, portsText(rules[k])}
		if groups[g] == nil {
			order = append(order, g)
		}
		groups[g] = append(groups[g], k)
	}
	for _, g := range order {
		ks := groups[g]
		if len(ks) < 2 {
			continue
		}
		ids := make([]policyapi.Peer, len(ks))
		for i, k := range ks {
			ids[i] = k.Peer
		}
		slices.Sort(ids)
		var b strings.Builder
		for i, id := range ids {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatUint(uint64(id), 10))
		}
		if first == nil {
			first, merged = map[policy.RuleKey]string{}, map[policy.RuleKey]bool{}
		}
		first[ks[0]] = b.String()
		for _, k := range ks[1:] {
			merged[k] = true
		}
	}
	return first, merged
}

// portsText is a canonical text of port ranges, for grouping.
func portsText(ranges []policy.PortRange) string {
	var b strings.Builder
	for _, pr := range ranges {
		b.WriteString(portRange(pr))
		b.WriteByte(',')
	}
	return b.String()
}

// hashUnions fills r.unionHashes for the unions in refs, keeping the
// hashes of unions still in use, and fails if two different unions would
// get the same set name: 60 bits of SHA-256 make that practically
// impossible, but a shared name would silently widen a rule.
func (r *renderer) hashUnions(refs map[ref]bool) error {
	old := r.unionHashes
	r.unionHashes = map[string]string{}
	seen := map[string]string{}
	for rf := range refs {
		if rf.union == "" {
			continue
		}
		h, ok := old[rf.union]
		if !ok {
			h = shortHash(rf.union)
		}
		if other, ok := seen[h]; ok {
			return fmt.Errorf("render union sets: identities %s and %s hash to the same set name %s", other, rf.union, unionTag+h)
		}
		seen[h] = rf.union
		r.unionHashes[rf.union] = h
	}
	return nil
}
