// Package endpointslice is the standalone agent's EndpointSlice
// controller: with no API server, nothing else turns a Service's selector
// into the endpoints the dataplane translates its ClusterIPs to.
//
// It computes slices as Kubernetes' endpoint-slice controller does, from
// the store: the pods of the Service's namespace that its selector
// matches, not Succeeded or Failed, with an address of the slice's family;
// each Service port's targetPort resolved by number, or by the name of the
// pod's container port of the port's protocol (a pod that does not declare
// the name is no endpoint of that port). Pods whose ports resolve alike
// share a slice, one set of slices per family of the Service's ClusterIPs.
//
// Readiness is what standalone can know: a pod is ready once it has an
// address, the one its CNI endpoint holds (a local pod the runtime ADDed
// and confirmed), or, for a pod of a manifest that lists status.podIPs, a
// pod elsewhere, those. There are no probes to fail and no pod is ever
// terminating, so every endpoint written is ready and serving.
//
// What it leaves out of the real controller: headless and ExternalName
// Services and Services without a selector get no slices (none has a
// ClusterIP to translate, or its endpoints are someone else's), a slice is
// never split at 100 endpoints, and endpoints carry no node, zone or
// target reference. Without a node, every endpoint counts as this node's
// for a Service of internalTrafficPolicy Local (policy.Snapshot.Node is
// empty standalone).
//
// [SyncTxn] makes the store's slices those of its Services and pods inside
// a write transaction: the manifests source calls it in the transaction
// that commits an edit, and the agent's endpoint service in every
// transaction of its own (a CNI ADD, confirm, DEL or GC), so a Service, its
// pods, their endpoints and its slices change together: a pod is a backend
// in force when its ADD answers, as in Kubernetes once its kubelet reports
// it ready; such a transaction that cannot change a slice (an ADD's
// reserve: see [Affects]) skips it. [Controller] calls it again whenever
// pods or Services change outside those, in a transaction of its own (and
// local endpoints too, unless told they sync themselves).
package endpointslice
