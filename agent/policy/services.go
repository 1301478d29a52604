package policy

import (
	"net/netip"
	"time"
)

// ServiceFrontend is one address, port and protocol of a Service that a
// dataplane translates for pods: a ClusterIP and one of the Service's
// ports, or one of the external frontends kube-proxy translates for pods
// too (see ServiceEntry.External). Kubernetes judges NetworkPolicy on the
// pod that receives a connection, after this translation.
type ServiceFrontend struct {
	// Addr is a ClusterIP, an externalIP, a load-balancer IP or an address
	// of the node, unmapped (IPv4 as 4 bytes).
	Addr netip.Addr
	// Port is the Service port, or the NodePort on the node's address.
	Port uint16
	// Proto is ProtoTCP, ProtoUDP or ProtoSCTP.
	Proto uint8
}

// ServiceBackend is one ready endpoint of a frontend: a pod address of the
// frontend's family and the port it listens on (a named targetPort already
// resolved, as the EndpointSlice carries it).
type ServiceBackend struct {
	Addr netip.Addr
	Port uint16
	// Local, in an External entry only: the EndpointSlice puts the
	// endpoint on the node the entry was compiled for (as endpointLocal
	// decides). A connection the frontend sends it is not masqueraded:
	// its ingress is judged on the client pod, as the node's FORWARD
	// chain judges it under kube-proxy, before kube-proxy's masquerade.
	Local bool
}

// ServiceEntry is what one frontend translates to.
type ServiceEntry struct {
	// Service is the Service's namespace/name, for status and events.
	Service string
	// Backends are the ready endpoints, sorted by address then port, each
	// once. Empty means the Service has no ready endpoint: new connections
	// are refused as kube-proxy refuses them (TCP reset or ICMP port
	// unreachable), never dropped in silence; but see NoLocalBackend.
	Backends []ServiceBackend
	// NoLocalBackend: Backends is empty because the Service's
	// internalTrafficPolicy is Local and no endpoint is on this node, while
	// other nodes have some. New connections are dropped, as kube-proxy
	// drops them ("has no local endpoints"): the Service exists, this
	// node's pods may not use it.
	NoLocalBackend bool
	// AffinityTimeout is sessionAffinity ClientIP's timeout: a client's new
	// connections go to the backend its last one went to, for this long
	// after that one's last packet. Zero means no affinity.
	AffinityTimeout time.Duration
	// External: the frontend is an externalIP, a load-balancer IP or a
	// NodePort on one of the node's addresses, of a Service whose
	// externalTrafficPolicy is Cluster. kube-proxy masquerades connections
	// to those (their backends see the node's address, a backend on
	// another node judges it), so a dataplane that translates one in
	// kube-proxy's place asks kube-proxy to masquerade it as its own when
	// the backend is not Local.
	External bool
	// FromExternalIPs: an External frontend whose address is one of the
	// Service's spec.externalIPs, which its author chose (the others'
	// addresses are the cluster's: a load balancer's, the node's). When
	// Services claim one frontend, a ClusterIP wins, then a load-balancer
	// IP or NodePort, then an externalIP (see compareClaim), so that an
	// externalIP takes no other Service's traffic.
	FromExternalIPs bool
	// leftToKubeProxy: an External frontend the dataplanes leave to
	// kube-proxy (see externalEntries). It is never published in
	// Desired.Services; it only claims the frontend, so that no other
	// Service's lower claim takes what kube-proxy translates for this one.
	leftToKubeProxy bool
}
