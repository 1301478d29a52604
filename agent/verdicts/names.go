package verdicts

import (
	"fmt"
	"time"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
)

// Namer turns an event's numbers into names, from the agent's committed
// state.
type Namer interface {
	// Endpoint names the pod behind the host interface of ifindex
	// ("namespace/name"), or the interface; "" when unknown.
	Endpoint(ifindex uint32) string
	// Peer names an identity: a pod ("namespace/name") or its label set;
	// "" when unknown.
	Peer(id uint32) string
	// Rule names a rule id of the policy maps (bpfmaps.Event.Rule).
	Rule(id uint32) (policy.RuleOrigin, bool)
}

// RuleIDsReporter is a Namer that can tell that rules in force carry no
// rule id because the datapath ran out of them (the datapath does): an
// allowed new connection of an isolated direction that names no rule is
// then said to be one of those, rather than one of no rule.
type RuleIDsReporter interface {
	RuleIDsExhausted() bool
}

// IsolatorsNamer is a Namer that knows which policies isolate an
// endpoint (the datapath does): a default-deny drop then names them, so
// that "why was this dropped" has a policy to read.
type IsolatorsNamer interface {
	// Isolators returns the policies (namespace/name) isolating the
	// endpoint at ifindex in direction dir (0 ingress, 1 egress).
	Isolators(ifindex uint32, dir uint8) []string
}

// Describe names ev with n.
func Describe(ev bpfmaps.Event, n Namer, now time.Time) api.Verdict {
	v := api.Verdict{
		Time:    now,
		Verdict: VerdictName(ev.Verdict),
		Reason:  ev.Reason.String(),
		Dir:     bpfmaps.DirString(ev.Dir),
		Proto:   bpfmaps.ProtoString(ev.Proto),
		Saddr:   ev.Saddr.String(),
		Sport:   ev.Sport,
		Daddr:   ev.Daddr.String(),
		Dport:   ev.Dport,
		Count:   1,
	}
	if v.Endpoint = n.Endpoint(ev.Ifindex); v.Endpoint == "" {
		v.Endpoint = fmt.Sprintf("ifindex %d", ev.Ifindex)
	}
	switch {
	case ev.Reason == bpfmaps.ReasonNoEndpoint || ev.Reason == bpfmaps.ReasonSpoofed || ev.Reason == bpfmaps.ReasonUnparseable:
		v.Peer = "-" // decided before the peer was looked up
	case ev.Peer == uint32(policyapi.PeerWorld):
		v.Peer = "world"
	case ev.Peer == uint32(policyapi.PeerAny):
		v.Peer = "-" // direction not isolated: nobody looked the peer up
	default:
		if v.Peer = n.Peer(ev.Peer); v.Peer == "" {
			v.Peer = fmt.Sprintf("identity %d", ev.Peer)
		}
	}
	if o, ok := n.Rule(ev.Rule); ok {
		v.Rule, v.Policy = o.String(), o.Namespace+"/"+o.Name
	} else if r, ok := n.(RuleIDsReporter); ok && unnamedAllow(ev) && r.RuleIDsExhausted() {
		v.Rule = "rule ids exhausted"
	} else {
		v.Rule = ruleOfReason(ev)
	}
	if iso, ok := n.(IsolatorsNamer); ok && isDefaultDeny(ev) {
		v.Isolators = iso.Isolators(ev.Ifindex, ev.Dir)
	}
	return v
}

// isDefaultDeny reports whether ev is a drop no rule allowed in a
// direction policies isolate.
func isDefaultDeny(ev bpfmaps.Event) bool {
	return ev.Reason == bpfmaps.ReasonPolicyIngress || ev.Reason == bpfmaps.ReasonPolicyEgress
}

// VerdictName names a verdict byte: allow, drop or reject.
func VerdictName(v uint8) string {
	switch v {
	case bpfmaps.VerdictAllow:
		return "allow"
	case bpfmaps.VerdictDrop:
		return "drop"
	case bpfmaps.VerdictReject:
		return "reject"
	}
	return fmt.Sprintf("verdict-%d", v)
}

// unnamedAllow reports whether ev is a new connection that a rule of an
// isolated direction allowed (its peer was looked up) without an id.
func unnamedAllow(ev bpfmaps.Event) bool {
	return ev.Reason == bpfmaps.ReasonAllowedNew && ev.Rule == 0 && ev.Peer != uint32(policyapi.PeerAny)
}

// ruleOfReason is what decided an event no policy rule decided.
func ruleOfReason(ev bpfmaps.Event) string {
	switch ev.Reason {
	case bpfmaps.ReasonPolicyIngress, bpfmaps.ReasonPolicyEgress:
		return "default deny"
	case bpfmaps.ReasonAllowedNew:
		if ev.Rule != 0 {
			return fmt.Sprintf("rule %d (unknown to this agent)", ev.Rule)
		}
		return "not isolated"
	case bpfmaps.ReasonAllowedNode:
		return "from the node"
	case bpfmaps.ReasonSpoofed:
		return "anti-spoofing"
	case bpfmaps.ReasonNoEndpoint:
		return "no endpoint"
	case bpfmaps.ReasonUnparseable:
		return "unparseable"
	case bpfmaps.ReasonServiceNoBackend:
		if ev.Verdict == bpfmaps.VerdictDrop {
			return "service without local backend"
		}
		return "service without backend"
	case bpfmaps.ReasonCTShare:
		return "conntrack share"
	case bpfmaps.ReasonServicePortClash:
		return "service source port clash"
	}
	return ev.Reason.String()
}
