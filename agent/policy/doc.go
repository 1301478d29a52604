// Package policy is the compiler that turns lockstep's model of
// Kubernetes NetworkPolicy and Services into the dataplane's desired state.
//
// The objects it reads (Namespace, Pod, NetworkPolicy, Service,
// EndpointSlice), their defaults and validation, and the parsed forms it
// compiles from live in [lockstep.dev/lockstep/agent/policy/api], which
// the store, the sources and the manifest loader import without the
// compiler.
//
// The compiler is pure: given a consistent snapshot (namespaces, pods with
// their addresses and identities, policies, local endpoints) it computes a
// [Desired] state. It never reads the store and never touches the kernel; the
// agent feeds it from one committed store transaction and hands the result to
// the dataplane, which applies it in one step.
//
// [Compile] computes a snapshot from scratch and is the reference. The
// agent uses [Incremental], which is told which objects changed and keeps
// what it derived between compilations (compiled policies, the identities
// each selector picks, address owners, each endpoint's rules), so that a
// change costs what it affects rather than the size of the cluster. Its
// results equal Compile's, and share their unchanged parts (see
// [Desired]); a randomized differential test holds it to both.
//
// # Semantics
//
// The compiler implements Kubernetes NetworkPolicy v1 as the API reference
// defines it:
//
//   - A pod is isolated for a direction only when a policy of its own
//     namespace selects it (spec.podSelector; {} selects every pod) and
//     lists that direction in its policy types. Defaults are the API
//     server's: protocol TCP; policy types [Ingress], plus Egress when the
//     policy has egress rules. Rules of all selecting policies add up.
//   - A peer with only a podSelector means pods of the policy's namespace;
//     only a namespaceSelector, every pod of the matching namespaces; both,
//     the matching pods of the matching namespaces; an ipBlock, the
//     addresses of cidr minus except — every address, pods' included. No
//     peers means every peer (api.PeerAny); no ports means every port of
//     every protocol, and the protocols without ports (api.ProtoOther).
//   - A named port resolves, for ingress, against the selected pod's own
//     container ports and, for egress, against each destination's: egress
//     entries are then keyed by the identities that declare the name.
//     A name nothing declares allows nothing.
//
// Pods are known to the dataplane by identity: one number per distinct
// identity key (api.IdentityKey: namespace, namespace labels, pod labels, named ports),
// which the caller assigns. Address ranges are known by CIDR class: the
// set of ipBlocks an address lies in, numbered deterministically and
// published as longest-prefix entries; each pod address carries its class
// too. A namespace without an object has the labels the API server would
// give it, {kubernetes.io/metadata.name: name}.
//
// # Services
//
// Kubernetes judges NetworkPolicy after Service translation: a pod whose
// egress allows app=server reaches the server through its ClusterIP. The
// compiler therefore also produces [Desired.Services], which the dataplane
// applies with the policy in one step: each ClusterIP (both families) and
// port of a Service is a frontend, whose backends are the endpoints its
// EndpointSlices list for that port (matched by the Service port's name and
// protocol), the ready ones or, when none is, the serving and terminating
// ones, as kube-proxy chooses them; under internalTrafficPolicy Local, those
// of this node ([Snapshot.Node]) alone. A Service labelled for another
// proxy is not translated, nor are, under the eBPF dataplane's limits
// ([Limits].ServiceFrontends), the Services of a namespace with a frontend
// of more backends than its maps hold for one, or, while the Services ask
// for more than they hold, of the namespaces with the largest share
// ([Desired.ServicesOverCapacity]): kube-proxy, where it runs, translates
// them. api.Service and api.EndpointSlice keep only what that needs. Where the slices come from is the sources' business: the
// API server's endpoint-slice controller in Kubernetes mode, the agent's
// own (agent/endpointslice) in standalone mode.
package policy
