package hns

import (
	"cmp"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"sync"

	"lockstep.dev/lockstep/agent/policy"
)

// Memory is an in-memory HNS for tests: one network's SetPolicies and its
// endpoints' ACLs, with the invariants HNS enforces, injectable transient
// failures, and a verdict function that evaluates the applied ACLs as HNS
// does. It implements Client.
//
// Every request that breaks an invariant (deleting a referenced set,
// referencing a missing one, adding a set twice, a malformed value) fails
// as HNS would and is also recorded, so a test can assert that a caller
// never even tried; see Violations. Requests to missing endpoints fail with
// ErrEndpointNotFound and are not violations: endpoints vanish under
// lockstep's feet in real life too.
type Memory struct {
	mu         sync.Mutex
	sets       map[string]SetPolicy
	endpoints  map[string][]ACL
	rng        *rand.Rand
	faultRate  float64
	faults     int
	violations []error
}

// NewMemory returns an empty HNS network with no endpoints.
func NewMemory() *Memory {
	return &Memory{sets: map[string]SetPolicy{}, endpoints: map[string][]ACL{}}
}

// AddEndpoint creates endpoint name (what the CNI plugin does on ADD).
func (m *Memory) AddEndpoint(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.endpoints[name]; !ok {
		m.endpoints[name] = nil
	}
}

// RemoveEndpoint deletes endpoint name and, as HNS does, its policies.
func (m *Memory) RemoveEndpoint(name string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.endpoints, name)
}

// SetFaults makes each later call fail with ErrTransient with probability
// rate, drawn from a generator seeded with seed. Half the failing writes
// fail before taking effect; the other half take effect (a batch in part)
// and then report the failure, like a request that timed out.
func (m *Memory) SetFaults(rate float64, seed uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.faultRate = rate
	m.rng = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// Faults returns how many failures were injected.
func (m *Memory) Faults() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.faults
}

// Violations returns the requests that broke an HNS invariant, in order.
func (m *Memory) Violations() []error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.violations)
}

// State returns a copy of the network's sets and of the ACLs of every
// endpoint that has any.
func (m *Memory) State() (map[string]SetPolicy, map[string][]ACL) {
	m.mu.Lock()
	defer m.mu.Unlock()
	sets := make(map[string]SetPolicy, len(m.sets))
	for id, s := range m.sets {
		sets[id] = cloneSet(s)
	}
	acls := map[string][]ACL{}
	for name, a := range m.endpoints {
		if len(a) > 0 {
			acls[name] = cloneACLs(a)
		}
	}
	return sets, acls
}

// fault decides whether this call fails, and whether before (no effect).
func (m *Memory) fault() (fail, before bool) {
	if m.rng == nil || m.faultRate <= 0 || m.rng.Float64() >= m.faultRate {
		return false, false
	}
	m.faults++
	return true, m.rng.IntN(2) == 0
}

// violation records err as an invariant violation and returns it.
func (m *Memory) violation(err error) error {
	m.violations = append(m.violations, err)
	return err
}

// SetPolicies lists the sets.
func (m *Memory) SetPolicies() ([]SetPolicy, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if fail, _ := m.fault(); fail {
		return nil, fmt.Errorf("list set policies: %w", ErrTransient)
	}
	out := make([]SetPolicy, 0, len(m.sets))
	for _, id := range sortedKeys(m.sets) {
		out = append(out, cloneSet(m.sets[id]))
	}
	return out, nil
}

// AddSetPolicies creates sets; members of a nested set must exist (or
// come earlier in the same request).
func (m *Memory) AddSetPolicies(sets []SetPolicy) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	fail, before := m.fault()
	if fail && before {
		return fmt.Errorf("add set policies: %w", ErrTransient)
	}
	pending := map[string]SetPolicy{}
	for _, s := range sets {
		if _, ok := m.sets[s.ID]; ok {
			return m.violation(fmt.Errorf("add set policy %s: %w", s.ID, ErrSetExists))
		}
		if _, ok := pending[s.ID]; ok {
			return m.violation(fmt.Errorf("add set policy %s twice: %w", s.ID, ErrSetExists))
		}
		if err := m.validSet(s, pending); err != nil {
			return m.violation(err)
		}
		pending[s.ID] = s
	}
	applyPrefix(m, sets, fail, func(s SetPolicy) { m.sets[s.ID] = cloneSet(s) })
	if fail {
		return fmt.Errorf("add set policies: %w", ErrTransient)
	}
	return nil
}

// UpdateSetPolicies replaces the values of existing sets.
func (m *Memory) UpdateSetPolicies(sets []SetPolicy) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	fail, before := m.fault()
	if fail && before {
		return fmt.Errorf("update set policies: %w", ErrTransient)
	}
	for _, s := range sets {
		have, ok := m.sets[s.ID]
		if !ok {
			return m.violation(fmt.Errorf("update set policy %s: %w", s.ID, ErrSetNotFound))
		}
		if have.Type != s.Type {
			return m.violation(fmt.Errorf("update set policy %s from %s to %s: %w", s.ID, have.Type, s.Type, ErrInvalid))
		}
		if err := m.validSet(s, nil); err != nil {
			return m.violation(err)
		}
	}
	applyPrefix(m, sets, fail, func(s SetPolicy) { m.sets[s.ID] = cloneSet(s) })
	if fail {
		return fmt.Errorf("update set policies: %w", ErrTransient)
	}
	return nil
}

// DeleteSetPolicies deletes sets that nothing references.
func (m *Memory) DeleteSetPolicies(sets []SetPolicy) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	fail, before := m.fault()
	if fail && before {
		return fmt.Errorf("delete set policies: %w", ErrTransient)
	}
	ids := make([]string, len(sets))
	deleting := map[string]bool{}
	for i, s := range sets {
		ids[i] = s.ID
		deleting[s.ID] = true
	}
	for _, id := range ids {
		if _, ok := m.sets[id]; !ok {
			return m.violation(fmt.Errorf("delete set policy %s: %w", id, ErrSetNotFound))
		}
		if by := m.referrer(id, deleting); by != "" {
			return m.violation(fmt.Errorf("delete set policy %s: referenced by %s: %w", id, by, ErrSetInUse))
		}
	}
	applyPrefix(m, ids, fail, func(id string) { delete(m.sets, id) })
	if fail {
		return fmt.Errorf("delete set policies: %w", ErrTransient)
	}
	return nil
}

// Endpoint reports whether endpoint name exists.
func (m *Memory) Endpoint(name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if fail, _ := m.fault(); fail {
		return fmt.Errorf("get hns endpoint %s: %w", name, ErrTransient)
	}
	if _, ok := m.endpoints[name]; !ok {
		return fmt.Errorf("get hns endpoint %s: %w", name, ErrEndpointNotFound)
	}
	return nil
}

// EndpointACLs returns the ACLs of every endpoint that has any.
func (m *Memory) EndpointACLs() (map[string][]ACL, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if fail, _ := m.fault(); fail {
		return nil, fmt.Errorf("list hns endpoints: %w", ErrTransient)
	}
	out := map[string][]ACL{}
	for name, a := range m.endpoints {
		if len(a) > 0 {
			out[name] = cloneACLs(a)
		}
	}
	return out, nil
}

// SetEndpointACLs replaces the ACLs of endpoint name in one step.
func (m *Memory) SetEndpointACLs(name string, acls []ACL) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	fail, before := m.fault()
	if fail && before {
		return fmt.Errorf("update acls of hns endpoint %s: %w", name, ErrTransient)
	}
	if _, ok := m.endpoints[name]; !ok {
		return fmt.Errorf("update acls of hns endpoint %s: %w", name, ErrEndpointNotFound)
	}
	for _, a := range acls {
		if err := m.validACL(a); err != nil {
			return m.violation(fmt.Errorf("update acls of hns endpoint %s: %w", name, err))
		}
	}
	m.endpoints[name] = cloneACLs(acls)
	if fail {
		return fmt.Errorf("update acls of hns endpoint %s: %w", name, ErrTransient)
	}
	return nil
}

// applyPrefix applies fn to items, or with a failing call to a random
// prefix of them.
func applyPrefix[T any](m *Memory, items []T, fail bool, fn func(T)) {
	n := len(items)
	if fail {
		n = m.rng.IntN(n + 1)
	}
	for _, it := range items[:n] {
		fn(it)
	}
}

// validSet checks s's values: addresses or prefixes for an IPSET, existing
// IPSETs (in m or pending) for a nested one.
func (m *Memory) validSet(s SetPolicy, pending map[string]SetPolicy) error {
	if !strings.HasPrefix(s.ID, IDPrefix) {
		return fmt.Errorf("set policy %q: id without prefix %s: %w", s.ID, IDPrefix, ErrInvalid)
	}
	switch s.Type {
	case SetIPSet:
		for _, v := range s.Values {
			if _, err := parseValue(v); err != nil {
				return fmt.Errorf("set policy %s: %w", s.ID, err)
			}
		}
	case SetNestedIPSet:
		for _, v := range s.Values {
			member, ok := m.sets[v]
			if !ok {
				member, ok = pending[v]
			}
			if !ok {
				return fmt.Errorf("set policy %s: member %s: %w", s.ID, v, ErrSetNotFound)
			}
			if member.Type != SetIPSet {
				return fmt.Errorf("set policy %s: member %s is %s: %w", s.ID, v, member.Type, ErrInvalid)
			}
		}
	default:
		return fmt.Errorf("set policy %s: type %q: %w", s.ID, s.Type, ErrInvalid)
	}
	return nil
}

// validACL checks a: known direction and action, ports only for TCP, UDP
// or SCTP and only on the destination side (all Memory can evaluate), and
// remote sets that exist.
func (m *Memory) validACL(a ACL) error {
	if a.Direction != In && a.Direction != Out || a.Action != Allow && a.Action != Block || a.Priority == 0 {
		return fmt.Errorf("acl %s: direction %q action %q priority %d: %w", a.ID, a.Direction, a.Action, a.Priority, ErrInvalid)
	}
	src, dst := a.RemotePorts, a.LocalPorts
	if a.Direction == Out {
		src, dst = dst, src
	}
	if len(src) > 0 {
		return fmt.Errorf("acl %s: source ports are not modelled: %w", a.ID, ErrInvalid)
	}
	if len(dst) > 0 && !slices.Contains(portProtocols, a.Protocol) {
		return fmt.Errorf("acl %s: ports for protocol %d: %w", a.ID, a.Protocol, ErrInvalid)
	}
	for _, id := range a.RemoteSets {
		if _, ok := m.sets[id]; !ok {
			return fmt.Errorf("acl %s: remote set %s: %w", a.ID, id, ErrSetNotFound)
		}
	}
	return nil
}

// referrer names what references set id, ignoring nested sets that are
// being deleted in the same request; "" when nothing does.
func (m *Memory) referrer(id string, deleting map[string]bool) string {
	for name, acls := range m.endpoints {
		for _, a := range acls {
			if slices.Contains(a.RemoteSets, id) {
				return fmt.Sprintf("acl %s of endpoint %s", a.ID, name)
			}
		}
	}
	for _, s := range m.sets {
		if s.Type == SetNestedIPSet && !deleting[s.ID] && slices.Contains(s.Values, id) {
			return "nested set " + s.ID
		}
	}
	return ""
}

// Allowed evaluates a packet between endpoint and remote with protocol
// proto and destination port (ignored for protocols without ports) in dir
// against the ACLs applied now, as HNS does: an endpoint without ACLs in
// dir allows everything; otherwise its ACLs of dir run in priority order
// (Block before Allow at equal priority) and the first that matches
// decides; none matching blocks.
func (m *Memory) Allowed(endpoint string, dir Direction, remote netip.Addr, proto uint8, port uint16) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	var acls []ACL
	for _, a := range m.endpoints[endpoint] {
		if a.Direction == dir {
			acls = append(acls, a)
		}
	}
	if len(acls) == 0 {
		return true
	}
	slices.SortStableFunc(acls, func(a, b ACL) int {
		if c := cmp.Compare(a.Priority, b.Priority); c != 0 {
			return c
		}
		return cmp.Compare(actionRank(a.Action), actionRank(b.Action))
	})
	remote = remote.Unmap()
	for _, a := range acls {
		if a.Protocol != ProtocolAny && a.Protocol != proto {
			continue
		}
		ports := a.LocalPorts
		if dir == Out {
			ports = a.RemotePorts
		}
		if len(ports) > 0 && !slices.ContainsFunc(ports, func(r policy.PortRange) bool { return port >= r.Lo && port <= r.Hi }) {
			continue
		}
		if len(a.RemoteSets) > 0 && !slices.ContainsFunc(a.RemoteSets, func(id string) bool { return m.inSet(id, remote) }) {
			continue
		}
		return a.Action == Allow
	}
	return false
}

// actionRank orders Block before Allow at equal priority.
func actionRank(a Action) int {
	if a == Block {
		return 0
	}
	return 1
}

// inSet reports whether addr is in set id (a nested set: in any member).
func (m *Memory) inSet(id string, addr netip.Addr) bool {
	s := m.sets[id]
	for _, v := range s.Values {
		if s.Type == SetNestedIPSet {
			if m.inSet(v, addr) {
				return true
			}
			continue
		}
		if p, err := parseValue(v); err == nil && p.Contains(addr) {
			return true
		}
	}
	return false
}

// parseValue parses an IPSET value: an address or a prefix.
func parseValue(v string) (netip.Prefix, error) {
	if strings.Contains(v, "/") {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("value %q: %w", v, errors.Join(ErrInvalid, err))
		}
		return p, nil
	}
	a, err := netip.ParseAddr(v)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("value %q: %w", v, errors.Join(ErrInvalid, err))
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

func cloneSet(s SetPolicy) SetPolicy {
	s.Values = slices.Clone(s.Values)
	return s
}

func cloneACLs(acls []ACL) []ACL {
	out := slices.Clone(acls)
	for i := range out {
		out[i].LocalPorts = slices.Clone(out[i].LocalPorts)
		out[i].RemotePorts = slices.Clone(out[i].RemotePorts)
		out[i].RemoteSets = slices.Clone(out[i].RemoteSets)
	}
	return out
}
