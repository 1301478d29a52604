package operator

import (
	"fmt"
	"net/netip"
	"slices"

	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
)

// podAddr is one address a pod holds, as the operator's pod informer last
// saw it.
type podAddr struct {
	addr netip.Addr
	pod  string // namespace/name
	node string // spec.nodeName
}

// podAddrs are the addresses of every pod that still holds one, sorted by
// address. A release is checked against them: whatever a node's agent
// answers in its NodeIPAM status (and any node's agent can write any
// node's status unless deploy/'s admission policy is installed), a block
// some pod still has an address in is never taken back. The zero value
// holds no address.
type podAddrs []podAddr

// newPodAddrs indexes the addresses of pods. Pods on the host network
// (their address is their node's) and pods that have finished (their
// address is free again) hold none.
func newPodAddrs(pods []*corev1.Pod) podAddrs {
	var out podAddrs
	for _, p := range pods {
		if !holdsAddress(p) {
			continue
		}
		for _, a := range podIPs(p) {
			out = append(out, podAddr{addr: a, pod: p.Namespace + "/" + p.Name, node: p.Spec.NodeName})
		}
	}
	slices.SortFunc(out, func(a, b podAddr) int { return a.addr.Compare(b.addr) })
	return out
}

// in returns a pod address inside block b, if there is one.
func (s podAddrs) in(b netip.Prefix) (podAddr, bool) {
	b = b.Masked()
	i, _ := slices.BinarySearchFunc(s, b.Addr(), func(p podAddr, a netip.Addr) int { return p.addr.Compare(a) })
	if i < len(s) && b.Contains(s[i].addr) {
		return s[i], true
	}
	return podAddr{}, false
}

// holdsRelease says why block b may not be released although its agent
// answered ready-for-release, or "" when no pod the operator sees has an
// address in it.
func (s podAddrs) holdsRelease(b netip.Prefix) string {
	p, ok := s.in(b)
	if !ok {
		return ""
	}
	return fmt.Sprintf("not released although the agent answered ready-for-release: pod %s on node %s still has address %s in it", p.pod, p.node, p.addr)
}

// holdsAddress reports whether pod p may hold a pod-network address.
func holdsAddress(p *corev1.Pod) bool {
	if p.Spec.HostNetwork {
		return false
	}
	return p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// podIPs are the addresses in p's status, IPv4-mapped ones unmapped.
func podIPs(p *corev1.Pod) []netip.Addr {
	ips := p.Status.PodIPs
	if len(ips) == 0 && p.Status.PodIP != "" {
		ips = []corev1.PodIP{{IP: p.Status.PodIP}}
	}
	var out []netip.Addr
	for _, ip := range ips {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}
