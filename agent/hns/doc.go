// Package hns is lockstep's NetworkPolicy dataplane for Windows nodes: it
// enforces a [policy.Desired] with the Host Networking Service's
// SetPolicies and endpoint ACLs, the primitives Azure NPM's Windows
// dataplane uses, behind the same enforcer.Dataplane interface as the
// eBPF dataplane.
//
// # From Desired to HNS
//
// A Desired speaks of peers: pod identities, CIDR classes, PeerAny and
// PeerWorld. Every peer a rule names becomes an IPSET SetPolicy on the pod
// network, whose ID ACLs use in place of addresses:
//
//   - a pod identity's set holds the addresses Desired.Addrs gives it
//     (lockstep-id-N);
//   - a CIDR class's set holds disjoint prefixes covering exactly the
//     addresses the eBPF dataplane puts in that class: the regions where
//     the longest matching prefix of Desired.CIDRs has the class, minus pod
//     addresses of another class, plus pod addresses of this one
//     (lockstep-cidr-N);
//   - PeerWorld's set is the address space minus every pod address
//     (lockstep-world; the compiler emits no PeerWorld rules today);
//   - PeerAny is an ACL without remote addresses.
//
// Peers that share a protocol and port list in one direction share one
// ACL, whose remote is a NESTEDIPSET of their IPSETs (lockstep-grp-HASH,
// named by its members), so the ACL count follows the number of distinct
// port lists, not of peers.
//
// Each endpoint's policy becomes an ordered ACL list per direction. HNS
// runs an endpoint's ACLs of a direction by priority, lowest first, and
// the first match decides. Lockstep's allow-list distinguishes "ports of
// TCP, UDP and SCTP" from "every protocol without ports", which HNS cannot
// say in one ACL, so the list has tiers: allows for ports, and for peers
// allowed everything (priority 100); for peers allowed the portless
// protocols, a block of TCP, UDP and SCTP (200) ahead of an allow of every
// protocol (300); and a final block (65000). An isolated direction ends in
// that block; a direction that is not isolated gets an allow-all at 65000
// when the other is isolated (HNS turns an endpoint with any ACL
// default-deny), and an endpoint isolated in neither direction has no
// lockstep ACLs at all.
//
// # Endpoint names
//
// Desired.Endpoints is keyed by [policy.LocalEndpoint.HostIfName], the
// store's Endpoint.HostIfName. On Linux that is the host-side veth. On
// Windows there is no host veth: a Windows CNI plugin records the name of
// the HNS endpoint it created for the pod there (HNS endpoint names are
// unique per host), and the Client finds the endpoint by that name. Attach
// only checks the endpoint exists: HNS has nothing to attach, and an
// endpoint is unrestricted until Apply gives it ACLs (the eBPF dataplane
// fails closed instead).
//
// # Apply order, and seed 000
//
// Azure NPM's seed 000 race: its dataplane applied sets, then updated
// pods' ACLs, and a background reconcile could delete a set between the
// two, so the update failed ("selector ipset ... does not exist") until
// the agent restarted. Here the reconcile is the enforcer's Resync, which
// takes the same lock as every apply, and Apply itself runs in the one
// order that keeps every request valid:
//
//  1. create and update SetPolicies (IPSETs before the NESTEDIPSETs that
//     contain them);
//  2. replace the ACLs of every endpoint whose ACLs changed, and remove
//     them from endpoints the Desired lacks;
//  3. delete the SetPolicies the Desired lacks that no applied ACL or
//     remaining nested set references (nested sets first).
//
// A set is deleted only once the update that removed its last reference
// has been applied. HNS refuses such a delete anyway; the order means
// lockstep never asks.
//
// Apply is incremental: it diffs against what it last applied, and only
// sends what changed. HNS calls fail now and then, and a failed call may
// have taken effect, or in part; after any failure the Dataplane forgets
// what it believed was applied and reads lockstep's sets and ACLs back
// from HNS on the next Apply, which therefore repairs whatever the failure
// left. An Apply that finds nothing to change reads HNS back too, so the
// enforcer's periodic resync repairs drift.
//
// HNS offers no transaction across requests, so unlike the eBPF dataplane
// an Apply is not atomic for the node: while it runs, packets can see new
// set members under old ACLs, or one endpoint's new ACLs before another's.
// Each endpoint's ACLs change in one request.
//
// # Real and modelled
//
// [NewClient] on Windows drives HNS through github.com/Microsoft/hcsshim's
// hcn package: SetPolicies with modify-network-settings requests, ACLs by
// rewriting the endpoint's policy list in one Update request (what Azure
// NPM does, since HNS's Remove matches ACLs unreliably), with an ACL Id
// field that hcn does not declare but HNS accepts. It needs SetPolicy
// support (HNS 13.0) and nested IPSETs (HNS 15.0). Elsewhere NewClient
// fails with errors.ErrUnsupported.
//
// [Memory] is an in-memory HNS that enforces HNS's invariants, injects
// transient failures and evaluates verdicts; the tests run the Dataplane
// against it. Memory is a model: what it says of HNS comes from hcn's
// types and Azure NPM's code, not from a Windows host. Not verified on one:
// which ACL field HNS matches an In ACL's remote sets against (the client
// follows Azure NPM: LocalAddresses for In, RemoteAddresses for Out); port
// ranges written as "lo-hi" (Azure NPM lists every port of a range);
// IPv6 and mixed-family IPSETs; empty IPSETs. HNS's errors are HRESULTs
// that hcn does not classify, so the real client cannot tell a refused
// delete from a transient failure; the Dataplane does not need it to.
package hns
