package explain

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// Errors a query can fail with, for callers that act on the kind.
var (
	// ErrUnknownPod is wrapped when --from or --to names a pod the
	// snapshot does not have.
	ErrUnknownPod = errors.New("no such pod")
	// ErrBadQuery is wrapped when the query cannot be parsed.
	ErrBadQuery = errors.New("bad query")
	// ErrUnknownService is wrapped when --to names a Service
	// (svc/NAMESPACE/NAME) the snapshot does not have.
	ErrUnknownService = errors.New("no such service")
	// ErrServiceAddress is wrapped when a Service named as --to cannot be
	// translated on the port asked (no such Service port, no ClusterIP of
	// the family, headless), or when --from names a Service: policy judges
	// pods, a Service's backends after translation.
	ErrServiceAddress = errors.New("service not translated")
)

// Verdicts of a direction and of a whole connection. A connection to a
// Service's frontend is judged on each of its ready backends: Allow when
// every backend allows it, Deny when none does, Partial when some do, and
// Refused when there is no ready backend (the dataplanes refuse the
// connection before any policy is asked); Deny without backends too when
// internalTrafficPolicy Local leaves the client's node none (the
// connection is dropped). They are the probe's Service cells '.', 'X', '~'
// and 'R'.
const (
	Allow   = "allow"
	Deny    = "deny"
	Partial = "partial"
	Refused = "refused"
)

// Directions, as Result and its reasons name them.
const (
	Egress  = "egress"
	Ingress = "ingress"
)

// Endpoint is one end of a connection: a pod (Namespace/Name), a Service
// (Namespace/Name and Service), or an address (Prefix; a single address
// is a /32 or /128), which may turn out to be a pod's or a ClusterIP.
type Endpoint struct {
	Namespace string
	Name      string
	// Service: Namespace/Name is a Service, written svc/NAMESPACE/NAME.
	Service bool
	Prefix  netip.Prefix
}

// ServicePrefix starts an endpoint that names a Service:
// svc/NAMESPACE/NAME.
const ServicePrefix = "svc/"

// IsPod reports whether e names a pod.
func (e Endpoint) IsPod() bool { return e.Name != "" && !e.Service }

// String returns NAMESPACE/NAME, svc/NAMESPACE/NAME, the address, or the
// CIDR.
func (e Endpoint) String() string {
	switch {
	case e.Service:
		return ServicePrefix + e.Namespace + "/" + e.Name
	case e.IsPod():
		return e.Namespace + "/" + e.Name
	case e.Prefix.IsSingleIP():
		return e.Prefix.Addr().String()
	}
	return e.Prefix.String()
}

// ParseEndpoint reads NAMESPACE/NAME (a pod), svc/NAMESPACE/NAME (a
// Service), an address or a CIDR. "NAME" alone is not accepted: the
// namespace is part of the answer.
func ParseEndpoint(s string) (Endpoint, error) {
	s = strings.TrimSpace(s)
	if rest, ok := strings.CutPrefix(s, ServicePrefix); ok && strings.Count(rest, "/") == 1 {
		ns, name, _ := strings.Cut(rest, "/")
		if ns == "" || name == "" {
			return Endpoint{}, fmt.Errorf("parse endpoint %q: %w: want svc/NAMESPACE/NAME", s, ErrBadQuery)
		}
		return Endpoint{Namespace: ns, Name: name, Service: true}, nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		a = a.Unmap()
		return Endpoint{Prefix: netip.PrefixFrom(a, a.BitLen())}, nil
	}
	if p, err := netip.ParsePrefix(s); err == nil {
		if p.Addr().Is4In6() {
			return Endpoint{}, fmt.Errorf("parse endpoint %q: %w: write the IPv4 CIDR, not an IPv4-mapped one", s, ErrBadQuery)
		}
		return Endpoint{Prefix: p.Masked()}, nil
	}
	ns, name, ok := strings.Cut(s, "/")
	if strings.ContainsAny(ns, ".:") {
		// A namespace is a DNS label: this was meant as a CIDR.
		return Endpoint{}, fmt.Errorf("parse endpoint %q: %w: not a valid CIDR", s, ErrBadQuery)
	}
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return Endpoint{}, fmt.Errorf("parse endpoint %q: %w: want NAMESPACE/POD, svc/NAMESPACE/NAME, an address or a CIDR", s, ErrBadQuery)
	}
	return Endpoint{Namespace: ns, Name: name}, nil
}

// ParsePort reads PORT or PORT/PROTO (tcp, udp or sctp in any case; TCP
// when left out).
func ParsePort(s string) (uint16, policyapi.Protocol, error) {
	num, proto, hasProto := strings.Cut(strings.TrimSpace(s), "/")
	n, err := strconv.ParseUint(num, 10, 16)
	if err != nil || n == 0 {
		return 0, "", fmt.Errorf("parse port %q: %w: want a port number 1-65535, optionally /tcp, /udp or /sctp", s, ErrBadQuery)
	}
	p := policyapi.TCP
	if hasProto {
		switch policyapi.Protocol(strings.ToUpper(proto)) {
		case policyapi.TCP, policyapi.UDP, policyapi.SCTP:
			p = policyapi.Protocol(strings.ToUpper(proto))
		default:
			return 0, "", fmt.Errorf("parse port %q: %w: protocol must be tcp, udp or sctp", s, ErrBadQuery)
		}
	}
	return uint16(n), p, nil
}

// Query is one connection to explain.
type Query struct {
	From, To Endpoint
	Port     uint16
	Protocol policyapi.Protocol // "" is TCP
	// Family picks the address of a pod an ipBlock is matched against: 4
	// or 6, 0 for the family of the other end when it is an address, else
	// the pod's first address.
	Family int
}

// Result is the answer to a Query. Its JSON field names are lower camel
// case, as every lockstep -o json.
type Result struct {
	From Party `json:"from"`
	// To is the destination; for a Service, the Service and the ClusterIP
	// connected to.
	To Party `json:"to"`
	// Port is the destination port: for a Service, the Service port.
	Port     uint16 `json:"port"`
	Protocol string `json:"protocol"`
	// Egress is the source's side, Ingress the destination's. Both are
	// left out for a Service: each of Backends has its own.
	Egress  Side `json:"egress,omitzero"`
	Ingress Side `json:"ingress,omitzero"`
	// Backends are, for a Service, the connection as the dataplanes
	// translate it to each ready backend (a pod, at the port the Service
	// port targets on it), each judged as a connection to that pod; empty
	// when the Service has no ready backend (Verdict refused) or none for
	// the client's node under internalTrafficPolicy Local (Verdict deny).
	Backends []Result `json:"backends,omitempty"`
	// Verdict is allow when both sides allow; for a Service, allow, deny,
	// partial or refused (see Allow).
	Verdict string `json:"verdict"`
	// Reason is one line: the deciding side's reason; for a Service, the
	// backends' verdicts.
	Reason string `json:"reason"`
}

// Party is an end of the connection as the answer names it.
type Party struct {
	// Pod is NAMESPACE/NAME, empty for an address outside the cluster.
	Pod string `json:"pod,omitempty"`
	// Service is the Service's NAMESPACE/NAME when the party is a
	// Service's frontend; Address is then the ClusterIP.
	Service string `json:"service,omitempty"`
	// Address is the address ipBlocks were matched against (or the CIDR
	// given); empty for a pod without one of the family.
	Address string `json:"address,omitempty"`
}

// String returns the pod's name, svc/ and the Service's name, or the
// address.
func (p Party) String() string {
	switch {
	case p.Pod != "":
		return p.Pod
	case p.Service != "":
		return ServicePrefix + p.Service
	}
	return p.Address
}

// Side is one direction's judgement.
type Side struct {
	// Direction is egress (the source's) or ingress (the destination's).
	Direction string `json:"direction"`
	// Endpoint is the pod (or address) whose policy judges this side.
	Endpoint string `json:"endpoint"`
	// External: the endpoint is an address outside the cluster, which has
	// no policy of its own.
	External bool `json:"external,omitempty"`
	// Isolated: a policy selects the endpoint for this direction.
	Isolated bool `json:"isolated"`
	// Policies are the policies (NAMESPACE/NAME) that select the endpoint
	// for this direction, sorted.
	Policies []string `json:"policies"`
	// FailedPolicies are those of Policies that fail closed, with why.
	FailedPolicies []Failed `json:"failedPolicies,omitempty"`
	// AllowedBy are the rules that allow the connection, e.g.
	// "default/allow-web ingress[1]", in policy and rule order.
	AllowedBy []string `json:"allowedBy"`
	// Verdict is allow or deny.
	Verdict string `json:"verdict"`
	// Reason says why in one line: "not isolated", "allowed by ...",
	// "default deny: ...", "failed closed: ...".
	Reason string `json:"reason"`
}

// Failed is a selecting policy that fails closed.
type Failed struct {
	Policy string `json:"policy"`
	Reason string `json:"reason"`
}

// Explain answers q from s. It does not modify s. A pod q names that s
// does not have is an error wrapping ErrUnknownPod. A Service's frontend
// as q.To (its ClusterIP, or svc/NAMESPACE/NAME, and q.Port a Service
// port) is translated as the dataplanes translate it, and the connection
// judged on each ready backend (see Result.Backends).
func Explain(s *policy.Snapshot, q Query) (*Result, error) {
	proto := q.Protocol
	if proto == "" {
		proto = policyapi.TCP
	}
	if q.Port == 0 {
		return nil, fmt.Errorf("explain: %w: port 0", ErrBadQuery)
	}
	ix := newIndex(s)
	if q.From.Service {
		return nil, fmt.Errorf("explain --from %s: %w: a Service opens no connections; name a pod or an address", q.From, ErrServiceAddress)
	}
	from, err := ix.resolve(q.From)
	if err != nil {
		return nil, fmt.Errorf("explain --from %s: %w", q.From, err)
	}
	if q.To.Service {
		return ix.viaService(q, proto, from)
	}
	to, err := ix.resolve(q.To)
	if err != nil {
		return nil, fmt.Errorf("explain --to %s: %w", q.To, err)
	}
	if !to.isPod() && to.prefix.IsSingleIP() {
		if svc := ix.serviceAt(to.prefix.Addr()); svc != nil {
			return ix.viaService(q, proto, from)
		}
		if e, err := ix.externalFrontend(from, to.prefix.Addr(), q.Port, proto); err != nil {
			return nil, fmt.Errorf("explain --to %s: translate the Services: %w", q.To, err)
		} else if e != nil {
			return nil, externalFrontendError(q, e, proto)
		}
	}
	family := q.Family
	switch {
	case family != 0:
	case !from.isPod():
		family = familyOf(from.prefix.Addr())
	case !to.isPod():
		family = familyOf(to.prefix.Addr())
	}
	return ix.judgeConn(from, to, family, q.Port, proto), nil
}

// judgeConn judges the connection from -> to on port/proto, ipBlocks
// matched against the pods' addresses of family (0: each one's first).
func (ix *index) judgeConn(from, to *party, family int, port uint16, proto policyapi.Protocol) *Result {
	from.pick(family)
	to.pick(family)
	c := conn{port: port, proto: proto, from: from, to: to}
	res := &Result{
		From: from.party(), To: to.party(), Port: port, Protocol: string(proto),
		Egress:  ix.side(c, Egress),
		Ingress: ix.side(c, Ingress),
	}
	res.Verdict, res.Reason = Allow, "allowed: "+res.Egress.Reason+"; "+res.Ingress.Reason
	for _, sd := range []Side{res.Egress, res.Ingress} {
		if sd.Verdict == Deny {
			res.Verdict, res.Reason = Deny, sd.Direction+" of "+sd.Endpoint+": "+sd.Reason
			break
		}
	}
	return res
}

// conn is the resolved connection.
type conn struct {
	port     uint16
	proto    policyapi.Protocol
	from, to *party
}

// party is a resolved endpoint: a pod with its namespace's labels, or a
// prefix outside the cluster.
type party struct {
	pod      *policyapi.Pod
	ns       string
	nsLabels map[string]string
	addrs    []netip.Addr
	prefix   netip.Prefix // the address ipBlocks match (the pod's chosen one)
}

func (p *party) isPod() bool { return p.pod != nil }

// pick chooses the pod address of family (0: the first) that ipBlocks
// are matched against.
func (p *party) pick(family int) {
	if !p.isPod() {
		return
	}
	for _, a := range p.addrs {
		if family == 0 || familyOf(a) == family {
			p.prefix = netip.PrefixFrom(a, a.BitLen())
			return
		}
	}
}

func (p *party) name() string {
	if p.isPod() {
		return p.ns + "/" + p.pod.Name
	}
	if p.prefix.IsSingleIP() {
		return p.prefix.Addr().String()
	}
	return p.prefix.String()
}

func (p *party) party() Party {
	out := Party{}
	if p.isPod() {
		out.Pod = p.name()
	}
	if p.prefix.IsValid() {
		out.Address = p.prefix.Addr().String()
		if !p.prefix.IsSingleIP() {
			out.Address = p.prefix.String()
		}
	}
	return out
}

func familyOf(a netip.Addr) int {
	if a.Is4() {
		return 4
	}
	return 6
}

// ParseQuery reads a query as `lockstep explain` takes it: --from and --to
// (see ParseEndpoint), --port (see ParsePort) and the family (4, 6 or 0).
func ParseQuery(from, to, port string, family int) (Query, error) {
	var q Query
	var err error
	if q.From, err = ParseEndpoint(from); err != nil {
		return Query{}, err
	}
	if q.To, err = ParseEndpoint(to); err != nil {
		return Query{}, err
	}
	if q.Port, q.Protocol, err = ParsePort(port); err != nil {
		return Query{}, err
	}
	if family != 0 && family != 4 && family != 6 {
		return Query{}, fmt.Errorf("parse family %d: %w: want 4 or 6", family, ErrBadQuery)
	}
	q.Family = family
	return q, nil
}
