// Package source is the agent's Kubernetes source: it follows the API
// server's Pods (of every namespace and node), Namespaces, NetworkPolicies,
// Services, EndpointSlices, Nodes and lockstep's NodeIPAMs with informers
// (kube/client.Informer), and feeds the agent's store the same Namespace,
// Pod, NetworkPolicy and Service objects (package agent/policy) that the
// standalone source reads from manifests, and the EndpointSlices that the
// standalone agent computes itself (agent/endpointslice). The enforcer
// cannot tell the two sources apart.
//
// # One event, one transaction
//
// Informer events only mark an object's key as changed. One goroutine
// commits: after the informers' first complete list it replaces the
// store's objects with all of them in one write transaction (so the first
// policy the dataplane sees is the whole cluster's, never half of it), and
// from then on it wakes on a mark, waits Options.BatchDelay for the rest of
// a burst, reads the current object of every marked key from the informer
// caches and writes them in one transaction. Reading the cache rather than
// the event means a batch always commits the latest state, and an object
// that changed five times in a burst is written once. Objects equal to
// what the store holds are not rewritten, so a status update that policy
// does not read (a pod's conditions) costs no revision.
//
// # Local and remote pods
//
// Policy across nodes needs every pod's address: remote pods are known by
// status.podIPs, which their kubelet writes. The pods of this node
// (spec.nodeName == Options.NodeName) are stored without addresses: their
// addresses are the ones this agent's own CNI endpoints hold, which the
// policy compiler adds, and a status written before a sandbox was
// re-created may name addresses the pod no longer has.
//
// # Nodes
//
// Nodes and NodeIPAMs are not stored: after every change the source hands
// Options.OnNodes a [Nodes] view (this node, its NodeIPAM, every other
// node's InternalIPs and blocks), from which the agent programs routes to
// other nodes (package agent/routes). A NodeIPAM counts only while the
// Node of its name controls it (v1alpha1.NodeIPAM.ControlledBy). The one
// exception is what Service translation needs of this agent's own Node,
// its zone (store.TableNodes), which endpoints' zone hints name: it is
// written in the batch's transaction like the other kinds.
//
// # Read-only, and light to link
//
// The source never writes to the API server. It reads core/v1,
// networking.k8s.io/v1 and discovery.k8s.io/v1 through kube/client into
// lockstep's own API types (kube/api), which declare only the fields
// lockstep reads and register nothing when the binary starts, instead of
// client-go and k8s.io/api, whose initialisers every lockstep-cni exec
// would run (cmd/lockstep/deps_test.go measures what is left). The
// informers drop what policy, routing and Service translation do not read
// before caching (see trim): an agent caches every pod and every
// EndpointSlice of the cluster.
//
// # Services
//
// Services and EndpointSlices are stored as the API has them, in the same
// transactions as pods and policies: a batch that changes a policy and the
// endpoints of a Service it allows reaches the dataplane in one apply. The
// endpoints are the API server's endpoint-slice controller's; the agent
// computes none in this mode. Readiness waits for their first list like
// the other kinds.
package source
