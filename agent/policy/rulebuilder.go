package policy

import (
	"cmp"
	"fmt"
	"slices"
)

// ruleBuilder collects the (key, port range) entries of an endpoint's
// rules in a flat list and builds the Rules map from it: sorted, merged as
// mergeRanges merges, every key's ranges in one shared backing array. It
// allocates two objects per build where appending to a map of slices
// allocates one per key, and its list is reused from build to build.
type ruleBuilder struct {
	ents []ruleEnt
}

// ruleEnt is one entry; hi and lo order it by key, then range.
type ruleEnt struct {
	hi uint64 // peer, direction, protocol
	lo uint32 // range low, range high
}

func (b *ruleBuilder) add(k RuleKey, pr PortRange) {
	b.ents = append(b.ents, ruleEnt{
		hi: uint64(k.Peer)<<32 | uint64(k.Dir)<<8 | uint64(k.Proto),
		lo: uint32(pr.Lo)<<16 | uint32(pr.Hi),
	})
}

func (e ruleEnt) key() RuleKey {
	return RuleKey{Peer: Peer(e.hi >> 32), Dir: Direction(e.hi >> 8), Proto: uint8(e.hi)}
}

// build returns the rules collected since the last build, or an error
// naming the first key that needs more than MaxPortRanges ranges (tooMany
// formats it).
func (b *ruleBuilder) build(tooMany func(k RuleKey, n int) error) (map[RuleKey][]PortRange, error) {
	ents := b.ents
	b.ents = b.ents[:0]
	slices.SortFunc(ents, func(x, y ruleEnt) int {
		if c := cmp.Compare(x.hi, y.hi); c != 0 {
			return c
		}
		return cmp.Compare(x.lo, y.lo)
	})
	keys := 0
	for i := range ents {
		if i == 0 || ents[i].hi != ents[i-1].hi {
			keys++
		}
	}
	rules := make(map[RuleKey][]PortRange, keys)
	backing := make([]PortRange, 0, len(ents))
	for i := 0; i < len(ents); {
		start := len(backing)
		j := i
		for ; j < len(ents) && ents[j].hi == ents[i].hi; j++ {
			r := PortRange{Lo: uint16(ents[j].lo >> 16), Hi: uint16(ents[j].lo)}
			if n := len(backing); n > start && int(r.Lo) <= int(backing[n-1].Hi)+1 {
				backing[n-1].Hi = max(backing[n-1].Hi, r.Hi)
				continue
			}
			backing = append(backing, r)
		}
		k := ents[i].key()
		if n := len(backing) - start; n > MaxPortRanges {
			return nil, tooMany(k, n)
		}
		rules[k] = backing[start:len(backing):len(backing)]
		i = j
	}
	return rules, nil
}

// forNamedPort calls fn with every port ports gives name under proto, as
// resolveNamedPort returns them, without allocating.
func forNamedPort(ports []namedPort, name string, proto uint8, fn func(port uint16)) {
	for _, np := range ports {
		if np.name == name && np.proto == proto {
			fn(np.port)
		}
	}
}

// errTooManyRanges is Compile's error for an endpoint key that needs more
// than MaxPortRanges ranges; policies names those selecting the endpoint.
func errTooManyRanges(le *LocalEndpoint, k RuleKey, n int, policies string) error {
	return fmt.Errorf("endpoint %s (pod %s/%s): %s rules for peer %d protocol %d need %d port ranges, at most %d fit (policies: %s); merge ports into ranges with endPort",
		le.HostIfName, le.Namespace, le.PodName, k.Dir, k.Peer, k.Proto, n, MaxPortRanges, policies)
}
