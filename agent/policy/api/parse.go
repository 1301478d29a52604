package api

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// ErrMappedPrefix is wrapped in the error of a NetworkPolicy whose ipBlock
// cidr or except lies inside ::ffff:0:0/96. lockstep refuses IPv4-mapped
// IPv6 prefixes rather than guess which family was meant: write the IPv4
// prefix instead.
var ErrMappedPrefix = errors.New("IPv4-mapped IPv6 prefix")

// ParsedPolicy is a validated NetworkPolicy with defaults applied and
// selectors, blocks and ports parsed.
type ParsedPolicy struct {
	Name        string // namespace/name, for errors
	Namespace   string
	PodSelector *Selector
	Applies     [2]bool // by Direction: the policy type is set
	Rules       [2][]*ParsedRule
	// Failed is why the policy fails closed ("" when it is valid and
	// within its budget): the compiler sets it, with no rules, and the
	// endpoints the policy selects get no allow in the directions it
	// applies to.
	Failed string
}

// ParsedRule is one ingress or egress rule.
type ParsedRule struct {
	Peers []PolicyPeer // empty: every peer (PeerAny)
	Ports []PortSpec   // empty: every port of every protocol
}

// PolicyPeer is one from/to entry. Exactly one of Block and (Pod, Namespace)
// is in use. For selector peers nil has the meaning of the API field: a
// nil Namespace means "the policy's own namespace", a nil Pod means "every pod".
type PolicyPeer struct {
	Pod, Namespace *Selector
	Block          *CIDRBlock
}

// Equal reports whether two parsed rules allow the same: the same
// peers and ports, in the same order.
func (a *ParsedRule) Equal(b *ParsedRule) bool {
	return slices.Equal(a.Ports, b.Ports) && slices.EqualFunc(a.Peers, b.Peers, PolicyPeer.Equal)
}

// Equal reports whether two peers pick the same: the same block, or
// selectors with the same requirements.
func (a PolicyPeer) Equal(b PolicyPeer) bool {
	if (a.Block == nil) != (b.Block == nil) || (a.Block != nil && a.Block.Key != b.Block.Key) {
		return false
	}
	return a.Pod.Equal(b.Pod) && a.Namespace.Equal(b.Namespace)
}

// CIDRBlock is a parsed IPBlock; Key is canonical across policies.
type CIDRBlock struct {
	CIDR   netip.Prefix
	Except []netip.Prefix // sorted
	Key    string
}

// PortSpec is one NetworkPolicyPort: a named port (Name != "") or the
// numeric range [Lo, Hi] of Proto.
type PortSpec struct {
	Proto  uint8
	Name   string
	Lo, Hi uint16
}

// ParsePolicy validates p and returns its parsed form. Errors name
// the policy and the field, as the API server's do.
func ParsePolicy(p *NetworkPolicy) (*ParsedPolicy, error) {
	ns := p.Namespace
	if ns == "" {
		ns = "default"
	}
	cp := &ParsedPolicy{Name: ns + "/" + p.Name, Namespace: ns}
	fail := func(field string, err error) (*ParsedPolicy, error) {
		return nil, fmt.Errorf("networkpolicy %s: %s: %w", cp.Name, field, err)
	}
	if p.Name == "" {
		return nil, fmt.Errorf("networkpolicy in namespace %q: metadata.name is required", ns)
	}
	sel, err := ParseSelector(&p.Spec.PodSelector)
	if err != nil {
		return fail("spec.podSelector", err)
	}
	cp.PodSelector = sel
	for i, t := range PolicyTypes(&p.Spec) {
		var d Direction
		switch t {
		case PolicyTypeIngress:
			d = Ingress
		case PolicyTypeEgress:
			d = Egress
		default:
			return fail(fmt.Sprintf("spec.policyTypes[%d]", i), fmt.Errorf("unknown policy type %q (want Ingress or Egress)", t))
		}
		if cp.Applies[d] {
			return fail(fmt.Sprintf("spec.policyTypes[%d]", i), fmt.Errorf("duplicate policy type %q", t))
		}
		cp.Applies[d] = true
	}
	for i, r := range p.Spec.Ingress {
		rule, err := parseRule(r.Ports, r.From, "from")
		if err != nil {
			return fail(fmt.Sprintf("spec.ingress[%d]", i), err)
		}
		cp.Rules[Ingress] = append(cp.Rules[Ingress], rule)
	}
	for i, r := range p.Spec.Egress {
		rule, err := parseRule(r.Ports, r.To, "to")
		if err != nil {
			return fail(fmt.Sprintf("spec.egress[%d]", i), err)
		}
		cp.Rules[Egress] = append(cp.Rules[Egress], rule)
	}
	return cp, nil
}

func parseRule(ports []NetworkPolicyPort, peers []NetworkPolicyPeer, peerField string) (*ParsedRule, error) {
	rule := &ParsedRule{}
	for i, port := range ports {
		spec, err := ParsePort(port)
		if err != nil {
			return nil, fmt.Errorf("ports[%d]: %w", i, err)
		}
		rule.Ports = append(rule.Ports, spec)
	}
	for i, peer := range peers {
		cp, err := parsePeer(peer)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", peerField, i, err)
		}
		rule.Peers = append(rule.Peers, cp)
	}
	return rule, nil
}

// ParsePort validates one port of a rule and returns it numbered: the
// protocol defaulted to TCP, a named port, or the range port..endPort
// (every port when none is given).
func ParsePort(p NetworkPolicyPort) (PortSpec, error) {
	proto := TCP
	if p.Protocol != nil {
		proto = *p.Protocol
	}
	num, err := proto.Number()
	if err != nil {
		return PortSpec{}, err
	}
	spec := PortSpec{Proto: num, Lo: 0, Hi: 65535}
	switch {
	case p.Port == nil:
		if p.EndPort != nil {
			return PortSpec{}, fmt.Errorf("endPort may not be specified when port is not")
		}
	case p.Port.IsString:
		if p.EndPort != nil {
			return PortSpec{}, fmt.Errorf("endPort may not be specified when port %q is named", p.Port.StrVal)
		}
		if !isPortName(p.Port.StrVal) {
			return PortSpec{}, fmt.Errorf("invalid port name %q: want 1-15 of a-z, 0-9 and '-', with a letter, no leading, trailing or double '-'", p.Port.StrVal)
		}
		spec.Name = p.Port.StrVal
	default:
		if err := checkPortNum("port", p.Port.IntVal); err != nil {
			return PortSpec{}, err
		}
		spec.Lo, spec.Hi = uint16(p.Port.IntVal), uint16(p.Port.IntVal)
		if p.EndPort != nil {
			if err := checkPortNum("endPort", *p.EndPort); err != nil {
				return PortSpec{}, err
			}
			if *p.EndPort < p.Port.IntVal {
				return PortSpec{}, fmt.Errorf("endPort %d is less than port %d", *p.EndPort, p.Port.IntVal)
			}
			spec.Hi = uint16(*p.EndPort)
		}
	}
	return spec, nil
}

func checkPortNum(field string, n int32) error {
	if n < 1 || n > 65535 {
		return fmt.Errorf("%s %d out of range 1-65535", field, n)
	}
	return nil
}

// Number maps a protocol name ("" meaning TCP) to its IP protocol number.
func (p Protocol) Number() (uint8, error) {
	switch p {
	case TCP, "":
		return ProtoTCP, nil
	case UDP:
		return ProtoUDP, nil
	case SCTP:
		return ProtoSCTP, nil
	}
	return 0, fmt.Errorf("unknown protocol %q (want TCP, UDP or SCTP)", p)
}

// isPortName reports whether s is an IANA service name, the form
// Kubernetes requires of a container's port names (and so of the names a
// NetworkPolicy or a Service's targetPort refers to).
func isPortName(s string) bool {
	if s == "" || len(s) > 15 || s[0] == '-' || s[len(s)-1] == '-' || strings.Contains(s, "--") {
		return false
	}
	letter := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z':
			letter = true
		case c >= '0' && c <= '9', c == '-':
		default:
			return false
		}
	}
	return letter
}

// isDNSLabel reports whether s is a DNS-1123 label (1 to 63 of a-z, 0-9
// and '-', starting and ending with a letter or digit): the form Kubernetes
// requires of a Service port's name, which may be longer than a container
// port's ("service-port-tcp-80").
func isDNSLabel(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func parsePeer(p NetworkPolicyPeer) (PolicyPeer, error) {
	if p.IPBlock != nil {
		if p.PodSelector != nil || p.NamespaceSelector != nil {
			return PolicyPeer{}, fmt.Errorf("ipBlock may not be combined with podSelector or namespaceSelector in one peer")
		}
		b, err := ParseIPBlock(p.IPBlock)
		if err != nil {
			return PolicyPeer{}, fmt.Errorf("ipBlock: %w", err)
		}
		return PolicyPeer{Block: b}, nil
	}
	if p.PodSelector == nil && p.NamespaceSelector == nil {
		return PolicyPeer{}, fmt.Errorf("must specify podSelector, namespaceSelector or ipBlock")
	}
	var cp PolicyPeer
	var err error
	if p.PodSelector != nil {
		if cp.Pod, err = ParseSelector(p.PodSelector); err != nil {
			return PolicyPeer{}, fmt.Errorf("podSelector: %w", err)
		}
	}
	if p.NamespaceSelector != nil {
		if cp.Namespace, err = ParseSelector(p.NamespaceSelector); err != nil {
			return PolicyPeer{}, fmt.Errorf("namespaceSelector: %w", err)
		}
	}
	return cp, nil
}

// ParseIPBlock validates an ipBlock peer and returns it parsed: host bits
// dropped as the API server drops them, IPv4-mapped prefixes refused (see
// CheckNotMapped), every except a strict subset of the cidr, sorted and
// deduplicated, and a key equal for equal blocks.
func ParseIPBlock(b *IPBlock) (*CIDRBlock, error) {
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil {
		return nil, fmt.Errorf("cidr: %w", err)
	}
	// Like the API server, accept host bits ("10.0.0.1/8") and drop them.
	cidr = cidr.Masked()
	if err := CheckNotMapped(cidr); err != nil {
		return nil, fmt.Errorf("cidr: %w", err)
	}
	ib := &CIDRBlock{CIDR: cidr}
	for i, e := range b.Except {
		ex, err := netip.ParsePrefix(e)
		if err != nil {
			return nil, fmt.Errorf("except[%d]: %w", i, err)
		}
		ex = ex.Masked()
		if err := CheckNotMapped(ex); err != nil {
			return nil, fmt.Errorf("except[%d]: %w", i, err)
		}
		if ex.Addr().Is4() != cidr.Addr().Is4() || ex.Bits() <= cidr.Bits() || !cidr.Contains(ex.Addr()) {
			return nil, fmt.Errorf("except[%d]: %s is not a strict subset of cidr %s", i, ex, cidr)
		}
		ib.Except = append(ib.Except, ex)
	}
	slices.SortFunc(ib.Except, ComparePrefix)
	ib.Except = slices.Compact(ib.Except)
	var k strings.Builder
	k.WriteString(cidr.String())
	for _, ex := range ib.Except {
		k.WriteString(" -" + ex.String())
	}
	ib.Key = k.String()
	return ib, nil
}

// mappedIPv4 is ::ffff:0:0/96, the IPv4-mapped IPv6 addresses.
var mappedIPv4 = netip.MustParsePrefix("::ffff:0:0/96")

// CheckNotMapped refuses a prefix inside ::ffff:0:0/96 with an error
// wrapping ErrMappedPrefix: the compiler for an ipBlock, the dataplanes for
// any such prefix in Desired.CIDRs they are handed. The dataplanes key
// IPv4 as IPv4-mapped IPv6 (lockstep_cidrs, the ipsets' view of classes),
// so such a prefix would be the same key as an IPv4 one
// (::ffff:0.0.0.0/96 is 0.0.0.0/0) and the verdicts of both would depend
// on which was written last; on the wire those addresses appear in no
// packet either dataplane passes (RFC 4291 2.5.5.2). A prefix that merely
// contains the range (::/0, ::/64) is ordinary IPv6 and allowed: IPv4
// addresses never match it.
func CheckNotMapped(p netip.Prefix) error {
	if p.Addr().Is4In6() && p.Bits() >= mappedIPv4.Bits() {
		v4 := netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-mappedIPv4.Bits())
		return fmt.Errorf("%w: %s (write the IPv4 prefix %s instead)", ErrMappedPrefix, p, v4)
	}
	return nil
}

// ComparePrefix orders prefixes by address, then length.
func ComparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}
