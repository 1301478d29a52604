package iptables

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// Errors callers can test for with errors.Is.
var (
	// ErrNotAttached: Apply was given an endpoint that Attach did not
	// record.
	ErrNotAttached = errors.New("endpoint not attached")
	// ErrBadIfName: an interface name iptables cannot match exactly (see
	// Attach).
	ErrBadIfName = errors.New("interface name not usable in iptables rules")
	// ErrUnknownMode: a Mode that is neither ModeNFT nor ModeLegacy.
	ErrUnknownMode = errors.New("unknown iptables mode")
	// ErrRulesRemain: DestroySets refused because lockstep rules of that
	// mode still exist; run Cleanup first.
	ErrRulesRemain = errors.New("lockstep rules remain")
)

// Chains. Every chain lockstep creates starts with chainPrefix, in the
// filter table of both families; nothing else in a table is lockstep's
// except the one jump from each hooked built-in chain.
//
// OUTPUT is not hooked: what the node itself sends to a pod is never
// lockstep's to judge (a pod cannot block its node). Earlier versions
// had a LOCKSTEP-OUTPUT chain, jumped to from OUTPUT; like any lockstep
// chain or jump a plan lacks, the first Apply of a Dataplane, which reads
// the tables back, deletes both, and Cleanup removes them too.
const (
	chainPrefix   = "LOCKSTEP-"
	chainForward  = "LOCKSTEP-FORWARD" // from FORWARD: pod to pod, pod to remote, remote to pod
	chainInput    = "LOCKSTEP-INPUT"   // from INPUT: pod to node
	chainLL6      = "LOCKSTEP-LL6"     // IPv6 anti-spoofing exceptions (link-local ICMPv6, DAD from ::)
	chainND6      = "LOCKSTEP-ND6"     // IPv6: the ND and MLD a pod may send
	chainND6In    = "LOCKSTEP-ND6-IN"  // IPv6: ND and MLD forwarded to a pod, all dropped
	egressPrefix  = "LOCKSTEP-E-"      // + host ifname: what the pod sends
	ingressPrefix = "LOCKSTEP-I-"      // + host ifname: what the pod receives
	jumpComment   = "lockstep: NetworkPolicy"
)

// hooks are the built-in filter chains lockstep jumps from, each with one
// rule inserted first, and the chain it jumps to.
var hooks = [...]struct{ builtin, chain string }{
	{"FORWARD", chainForward},
	{"INPUT", chainInput},
}

func isLockstepChain(name string) bool { return strings.HasPrefix(name, chainPrefix) }

// isDispatch reports whether chain is one of the hook chains, whose rules
// are per-endpoint jumps in no particular order: Apply edits them rule by
// rule instead of rewriting them.
func isDispatch(chain string) bool {
	return chain == chainForward || chain == chainInput
}

// Set names. ipsets are one namespace-wide table shared by iptables-legacy
// and iptables-nft (and anything else on the node), so every name carries
// the mode and the family:
//
//	lockstep-nft4-id-300       pod addresses of identity 300 (hash:ip)
//	lockstep-legacy6-net-3     addresses of CIDR class 3 (hash:net)
//	lockstep-nft4-pods         every known pod address (hash:ip), for PeerWorld
//	lockstep-nft4-u-0q3v8d1k5m2a  pod addresses of several identities (see unionSetName)
//
// A new nft dataplane therefore never updates, flushes or destroys a set
// that legacy leftovers still reference, and the legacy clean-up destroys
// only legacy sets. The longest name, lockstep-legacy6-net-2147483647, is
// the 31 characters ipset allows.
func setPrefix(m Mode, f Family) string {
	return "lockstep-" + m.short() + strconv.Itoa(int(f)) + "-"
}

// isModeSet reports whether name is a set of mode m (either family).
func isModeSet(m Mode, name string) bool {
	return strings.HasPrefix(name, setPrefix(m, IPv4)) || strings.HasPrefix(name, setPrefix(m, IPv6))
}

// setName returns the set a rule for peer matches in family f, and whether
// the peer has one: PeerAny needs no set, and peers the eBPF dataplane can
// never see as a remote end (NoCIDRClass, reserved identities other than
// PeerWorld) match nothing.
func setName(m Mode, f Family, peer policyapi.Peer) (string, bool) {
	switch {
	case peer == policyapi.PeerWorld:
		return setPrefix(m, f) + "pods", true
	case peer&policyapi.CIDRClassBit != 0:
		if peer == policyapi.NoCIDRClass {
			return "", false
		}
		return setPrefix(m, f) + "net-" + strconv.FormatUint(uint64(peer&^policyapi.CIDRClassBit), 10), true
	case peer >= policyapi.FirstPodIdentity:
		return setPrefix(m, f) + "id-" + strconv.FormatUint(uint64(peer), 10), true
	}
	return "", false
}

// checkIfName accepts the host interface names lockstep writes into rules
// and chain names verbatim: 1 to 15 characters of [A-Za-z0-9_.@-], starting
// with a letter or digit. That excludes iptables' wildcard ('+' at the
// end), negation ('!') and quoting, and keeps LOCKSTEP-E-<name> within the
// 28 characters of a chain name.
func checkIfName(name string) error {
	if len(name) == 0 || len(name) > 15 {
		return fmt.Errorf("%w: %q must have 1 to 15 characters", ErrBadIfName, name)
	}
	for i, c := range []byte(name) {
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if alnum || i > 0 && (c == '_' || c == '.' || c == '@' || c == '-') {
			continue
		}
		return fmt.Errorf("%w: %q (use letters, digits and _.@-)", ErrBadIfName, name)
	}
	return nil
}
