package policy

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

// Default fills in what the API server defaults in a NetworkPolicy: every
// port's protocol (TCP) and the policy types ([Ingress], plus Egress when
// the policy has egress rules). The compiler applies the same defaults
// without calling Default, so objects from either source compile alike.
func (p *NetworkPolicy) Default() {
	p.Spec.PolicyTypes = policyTypes(&p.Spec)
	for i := range p.Spec.Ingress {
		defaultPorts(p.Spec.Ingress[i].Ports)
	}
	for i := range p.Spec.Egress {
		defaultPorts(p.Spec.Egress[i].Ports)
	}
}

func defaultPorts(ports []NetworkPolicyPort) {
	for i := range ports {
		if ports[i].Protocol == nil {
			tcp := TCP
			ports[i].Protocol = &tcp
		}
	}
}

// policyTypes returns the spec's policy types, defaulted as the API server
// does when none are given.
func policyTypes(spec *NetworkPolicySpec) []PolicyType {
	if len(spec.PolicyTypes) > 0 {
		return spec.PolicyTypes
	}
	if len(spec.Egress) > 0 {
		return []PolicyType{PolicyTypeIngress, PolicyTypeEgress}
	}
	return []PolicyType{PolicyTypeIngress}
}

// Validate reports the first reason the API server would reject p, naming
// the policy and the offending field.
func (p *NetworkPolicy) Validate() error {
	_, err := compilePolicy(p)
	return err
}

// Default fills in what the API server defaults in a Pod: container port
// protocols (TCP).
func (p *Pod) Default() {
	for i := range p.Spec.Containers {
		for j := range p.Spec.Containers[i].Ports {
			if p.Spec.Containers[i].Ports[j].Protocol == "" {
				p.Spec.Containers[i].Ports[j].Protocol = TCP
			}
		}
	}
}

// Validate checks the parts of a Pod lockstep uses: its name, container
// ports and addresses.
func (p *Pod) Validate() error {
	if p.Name == "" {
		return fmt.Errorf("pod in namespace %q: metadata.name is required", p.Namespace)
	}
	for i, c := range p.Spec.Containers {
		for j, cp := range c.Ports {
			field := fmt.Sprintf("spec.containers[%d].ports[%d]", i, j)
			if cp.ContainerPort < 1 || cp.ContainerPort > 65535 {
				return fmt.Errorf("pod %s/%s: %s: containerPort %d out of range 1-65535", p.Namespace, p.Name, field, cp.ContainerPort)
			}
			if _, err := protoNumber(cp.Protocol); err != nil {
				return fmt.Errorf("pod %s/%s: %s: %w", p.Namespace, p.Name, field, err)
			}
			if cp.Name != "" && !isPortName(cp.Name) {
				return fmt.Errorf("pod %s/%s: %s: invalid port name %q", p.Namespace, p.Name, field, cp.Name)
			}
		}
	}
	if _, err := podAddrs(p); err != nil {
		return err
	}
	return nil
}

// Default adds the kubernetes.io/metadata.name label, as the API server does.
func (n *Namespace) Default() {
	if n.Labels[NamespaceNameLabel] == n.Name {
		return
	}
	labels := make(map[string]string, len(n.Labels)+1)
	for k, v := range n.Labels {
		labels[k] = v
	}
	labels[NamespaceNameLabel] = n.Name
	n.Labels = labels
}

// Validate checks that the namespace has a name.
func (n *Namespace) Validate() error {
	if n.Name == "" {
		return fmt.Errorf("namespace: metadata.name is required")
	}
	return nil
}

// compiledPolicy is a validated NetworkPolicy with defaults applied and
// selectors, blocks and ports parsed.
type compiledPolicy struct {
	name    string // namespace/name, for errors
	ns      string
	podSel  *selector
	applies [2]bool // by Direction: the policy type is set
	rules   [2][]*compiledRule
	// failed is why the policy fails closed ("" when it compiled): it
	// has no rules, and the endpoints it selects no allow in the
	// directions it applies to (see compileOrFail).
	failed string
}

// compiledRule is one ingress or egress rule.
type compiledRule struct {
	peers []compiledPeer // empty: every peer (PeerAny)
	ports []portSpec     // empty: every port of every protocol

	// resolved caches the rule's peers once the compiler has needed them.
	resolved *rulePeers
}

// compiledPeer is one from/to entry. Exactly one of block and (pod, ns)
// is in use. For selector peers nil has the meaning of the API field: a
// nil ns means "the policy's own namespace", a nil pod means "every pod".
type compiledPeer struct {
	pod, ns *selector
	block   *ipBlock
}

// ipBlock is a parsed IPBlock; key is canonical across policies.
type ipBlock struct {
	cidr   netip.Prefix
	except []netip.Prefix // sorted
	key    string
}

// portSpec is one NetworkPolicyPort: a named port (name != "") or the
// numeric range [lo, hi] of proto.
type portSpec struct {
	proto  uint8
	name   string
	lo, hi uint16
}

// compilePolicy validates p and returns its compiled form. Errors name
// the policy and the field, as the API server's do.
func compilePolicy(p *NetworkPolicy) (*compiledPolicy, error) {
	ns := p.Namespace
	if ns == "" {
		ns = "default"
	}
	cp := &compiledPolicy{name: ns + "/" + p.Name, ns: ns}
	fail := func(field string, err error) (*compiledPolicy, error) {
		return nil, fmt.Errorf("networkpolicy %s: %s: %w", cp.name, field, err)
	}
	if p.Name == "" {
		return nil, fmt.Errorf("networkpolicy in namespace %q: metadata.name is required", ns)
	}
	sel, err := compileSelector(&p.Spec.PodSelector)
	if err != nil {
		return fail("spec.podSelector", err)
	}
	cp.podSel = sel
	for i, t := range policyTypes(&p.Spec) {
		var d Direction
		switch t {
		case PolicyTypeIngress:
			d = Ingress
		case PolicyTypeEgress:
			d = Egress
		default:
			return fail(fmt.Sprintf("spec.policyTypes[%d]", i), fmt.Errorf("unknown policy type %q (want Ingress or Egress)", t))
		}
		if cp.applies[d] {
			return fail(fmt.Sprintf("spec.policyTypes[%d]", i), fmt.Errorf("duplicate policy type %q", t))
		}
		cp.applies[d] = true
	}
	for i, r := range p.Spec.Ingress {
		rule, err := compileRule(r.Ports, r.From, "from")
		if err != nil {
			return fail(fmt.Sprintf("spec.ingress[%d]", i), err)
		}
		cp.rules[Ingress] = append(cp.rules[Ingress], rule)
	}
	for i, r := range p.Spec.Egress {
		rule, err := compileRule(r.Ports, r.To, "to")
		if err != nil {
			return fail(fmt.Sprintf("spec.egress[%d]", i), err)
		}
		cp.rules[Egress] = append(cp.rules[Egress], rule)
	}
	return cp, nil
}

func compileRule(ports []NetworkPolicyPort, peers []NetworkPolicyPeer, peerField string) (*compiledRule, error) {
	rule := &compiledRule{}
	for i, port := range ports {
		spec, err := compilePort(port)
		if err != nil {
			return nil, fmt.Errorf("ports[%d]: %w", i, err)
		}
		rule.ports = append(rule.ports, spec)
	}
	for i, peer := range peers {
		cp, err := compilePeer(peer)
		if err != nil {
			return nil, fmt.Errorf("%s[%d]: %w", peerField, i, err)
		}
		rule.peers = append(rule.peers, cp)
	}
	return rule, nil
}

func compilePort(p NetworkPolicyPort) (portSpec, error) {
	proto := TCP
	if p.Protocol != nil {
		proto = *p.Protocol
	}
	num, err := protoNumber(proto)
	if err != nil {
		return portSpec{}, err
	}
	spec := portSpec{proto: num, lo: 0, hi: 65535}
	switch {
	case p.Port == nil:
		if p.EndPort != nil {
			return portSpec{}, fmt.Errorf("endPort may not be specified when port is not")
		}
	case p.Port.IsString:
		if p.EndPort != nil {
			return portSpec{}, fmt.Errorf("endPort may not be specified when port %q is named", p.Port.StrVal)
		}
		if !isPortName(p.Port.StrVal) {
			return portSpec{}, fmt.Errorf("invalid port name %q: want 1-15 of a-z, 0-9 and '-', with a letter, no leading, trailing or double '-'", p.Port.StrVal)
		}
		spec.name = p.Port.StrVal
	default:
		if err := checkPortNum("port", p.Port.IntVal); err != nil {
			return portSpec{}, err
		}
		spec.lo, spec.hi = uint16(p.Port.IntVal), uint16(p.Port.IntVal)
		if p.EndPort != nil {
			if err := checkPortNum("endPort", *p.EndPort); err != nil {
				return portSpec{}, err
			}
			if *p.EndPort < p.Port.IntVal {
				return portSpec{}, fmt.Errorf("endPort %d is less than port %d", *p.EndPort, p.Port.IntVal)
			}
			spec.hi = uint16(*p.EndPort)
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

// protoNumber maps a protocol name ("" meaning TCP) to its IP protocol number.
func protoNumber(p Protocol) (uint8, error) {
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

func compilePeer(p NetworkPolicyPeer) (compiledPeer, error) {
	if p.IPBlock != nil {
		if p.PodSelector != nil || p.NamespaceSelector != nil {
			return compiledPeer{}, fmt.Errorf("ipBlock may not be combined with podSelector or namespaceSelector in one peer")
		}
		b, err := compileIPBlock(p.IPBlock)
		if err != nil {
			return compiledPeer{}, fmt.Errorf("ipBlock: %w", err)
		}
		return compiledPeer{block: b}, nil
	}
	if p.PodSelector == nil && p.NamespaceSelector == nil {
		return compiledPeer{}, fmt.Errorf("must specify podSelector, namespaceSelector or ipBlock")
	}
	var cp compiledPeer
	var err error
	if p.PodSelector != nil {
		if cp.pod, err = compileSelector(p.PodSelector); err != nil {
			return compiledPeer{}, fmt.Errorf("podSelector: %w", err)
		}
	}
	if p.NamespaceSelector != nil {
		if cp.ns, err = compileSelector(p.NamespaceSelector); err != nil {
			return compiledPeer{}, fmt.Errorf("namespaceSelector: %w", err)
		}
	}
	return cp, nil
}

func compileIPBlock(b *IPBlock) (*ipBlock, error) {
	cidr, err := netip.ParsePrefix(b.CIDR)
	if err != nil {
		return nil, fmt.Errorf("cidr: %w", err)
	}
	// Like the API server, accept host bits ("10.0.0.1/8") and drop them.
	cidr = cidr.Masked()
	if err := CheckNotMapped(cidr); err != nil {
		return nil, fmt.Errorf("cidr: %w", err)
	}
	ib := &ipBlock{cidr: cidr}
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
		ib.except = append(ib.except, ex)
	}
	slices.SortFunc(ib.except, comparePrefix)
	ib.except = slices.Compact(ib.except)
	var k strings.Builder
	k.WriteString(cidr.String())
	for _, ex := range ib.except {
		k.WriteString(" -" + ex.String())
	}
	ib.key = k.String()
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

// comparePrefix orders prefixes by address, then length.
func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}
