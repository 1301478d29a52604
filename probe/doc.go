// Package probe tests NetworkPolicy with real packets on a throwaway node.
//
// [Run] builds a node network namespace (see probe/nodesim), starts the
// real lockstep agent in it as a subprocess of the lockstep binary, creates
// every pod through the real CNI path (libcni executing lockstep-cni), opens
// a listener in each pod for every port the pod declares, and then tries a
// connection for every ordered pair of distinct pods and every port the
// destination declares. A TCP probe is allowed when the connection is
// established; a UDP probe when a nonce sent to the destination comes back
// from its echo listener. Everything a connection needs is created inside the
// source pod's namespace, so packets take the same path as pod traffic does:
// pod veth, node namespace, the agent's dataplane, destination veth.
// Every listener answers with its pod's NAMESPACE/NAME.
//
// # Through Services
//
// With [Config].Via [ViaService] or [ViaBoth] (the default when there are
// Services), the probe also connects from every pod to every frontend
// (the ClusterIP of the probed family and a Service port) of every
// Service, the pod's own Services included (hairpin). The agent reads the
// same Services from the manifests, computes their endpoints and has its
// dataplane translate them; Kubernetes judges NetworkPolicy on the backend
// that receives the connection, after translation. The node then has a
// default route to a namespace that drops what it is sent, as a real node
// has a way out: a ClusterIP nothing translates is lost there. The node
// sends its ICMP errors without a per-destination rate limit, so that a
// pod's burst of UDP attempts at a Service without endpoints is refused
// every time.
//
// Each new connection lands on a backend the dataplane picks, so one
// frontend is probed with up to [Config].Attempts connections
// ([DefaultAttempts], 16), all at once as the workers allow, and decided
// by what they found (see [Outcome]): '.' every attempt answered, 'X' none
// answered or refused (dropped), '~' some answered and some not, 'R' none
// answered and some refused at once (a TCP reset or an ICMP port
// unreachable: a Service without a ready endpoint is refused, a policy's
// denial is a silent drop). It stops early once one attempt was answered
// and one was not. When a fraction p of a Service's backends are allowed
// to a pod and each attempt picks a backend uniformly and independently
// (as the iptables and eBPF dataplanes do without session affinity), the
// probe wrongly says '.' with probability p^N and wrongly 'X' with
// (1-p)^N: with N=16, 1.5e-5 for one backend of two, 1.5e-3 for 'X'
// with one allowed backend of three, 1.0e-2 for '.' with one denied
// backend of four. Raise Attempts for Services with many backends. With
// sessionAffinity ClientIP every attempt of a pod reaches one backend, so
// such a Service shows '.' or 'X' per pod.
//
// The result is a [Report]: the pods with their addresses, one [Result]
// per probe by pod address, and the Services with one [ServiceResult] per
// pod and frontend. [Report.Table] renders it as the reachability tables
// of the upstream Kubernetes e2e tests ('.' allowed, 'X' denied, '?' could
// not be probed, '-' self), one block per port pods declare, followed by
// one block per port Services declare, headed "svc:PORT/PROTOCOL", a
// column per Service that has the port. [ParseTable] reads the tables
// back and [CompareTables] compares them cell by cell, so expected
// outcomes can be written by hand.
//
// A probe that cannot be made is reported with Allowed nil and an error
// instead of being guessed: on a kernel without SCTP sockets every SCTP
// probe is such a result.
//
// Run leaves nothing behind: the agent runs in its own process group and is
// killed when Run returns (and by the kernel if the prober dies), and every
// namespace, the bpffs mount and the work directory are removed on success,
// failure and cancellation alike. [SweepStale] removes what a run killed
// outright left behind.
package probe
