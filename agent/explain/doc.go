// Package explain answers "why can (or can't) A reach B on this port?" by
// name: for one connection it says, for each side that judges it (the
// source's egress, the destination's ingress), whether that side is
// isolated, which NetworkPolicies select it, and which rule of which
// policy allows the connection — or that none does.
//
// It is pure: its input is a [policy.Snapshot] (namespaces, pods with
// their addresses, policies, Services and EndpointSlices) and a [Query];
// its output a [Result]. The
// agent feeds it one read transaction of its store (`lockstep explain` on
// a node, through the agent's socket); `lockstep explain --manifests` and
// `lockstep probe` feed it manifests. It re-derives the answer from the
// objects instead of reading the compiled dataplane state, so that it can
// name policies and rules, which the dataplane no longer knows; the probe
// scenarios hold both to the same tables (see probe).
//
// It follows the semantics agent/policy/doc.go states:
//
//   - A pod is isolated for a direction when a policy of its namespace
//     selects it and lists that direction in its (defaulted) policy types.
//     Rules of every selecting policy add up: a connection is allowed in a
//     direction when the pod is not isolated for it, or when any rule of a
//     selecting policy allows it.
//   - A policy the API server would reject (or lockstep cannot compile)
//     fails closed: the pods it selects get no allow in the directions it
//     applies to, whatever other policies say.
//   - Peers: a podSelector alone picks pods of the policy's namespace; a
//     namespaceSelector alone every pod of the matching namespaces; both,
//     the matching pods of the matching namespaces; an ipBlock the
//     addresses of cidr minus except, pods' included. No peers: everyone.
//   - Ports: none means every port of every protocol; a named port
//     resolves on the destination pod's containers (for ingress the
//     selected pod is the destination; for egress each destination
//     resolves it itself), and allows nothing towards an address outside
//     the cluster.
//   - An address outside the cluster has no policy of its own: its side of
//     the connection allows. An address that belongs to a pod of the
//     snapshot is that pod.
//   - Policy judges a connection to a Service after translation, on the
//     pod that receives it. A destination that is a Service's frontend (a
//     ClusterIP, or svc/NAMESPACE/NAME, and a Service port) is translated
//     with the compiler's own table ([policy.ServiceTable]), so to the
//     backends the dataplanes pick from: the ready endpoints of the
//     Service's EndpointSlices for that port (serving terminating ones
//     when none is ready), each at the port its slice resolved the
//     targetPort to (a named targetPort resolves per pod). Each backend is
//     judged as a connection to that pod on that port, from the client's
//     address of the ClusterIP's family; the Service's verdict is allow
//     (every backend allows), deny (none does), partial (some do) or
//     refused (no ready backend: the dataplanes refuse the connection
//     before any policy); deny, without backends, when the Service's
//     internalTrafficPolicy is Local and only other nodes than the
//     client's have endpoints (the client pod's node in a snapshot with a
//     Node, else the snapshot's Node; the dataplanes drop the connection).
//     A snapshot of manifests has no slices of its
//     own: its caller computes them as the standalone agent does
//     (endpointslice.FromStatus).
//
// Not modelled (the compiler's, and the answer may then differ from the
// dataplane): the per-namespace limits and the per-endpoint port range
// limit, which fail policies closed on very large policy sets (`lockstep
// status` lists those); an egress named port through an ipBlock, which
// the compiler resolves per identity (every pod of the identity must lie
// in the block), is resolved here on the one destination pod;
// sessionAffinity, which sends all of a client's connections to one
// backend (a partial Service is then allowed or denied per client, and
// which is not known ahead).
package explain
