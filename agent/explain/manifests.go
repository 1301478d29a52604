package explain

import (
	"net/netip"

	"lockstep.dev/lockstep/agent/endpointslice"
	"lockstep.dev/lockstep/agent/manifests"
	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// ManifestSnapshot is the snapshot explain judges manifests by, as the
// standalone agent enforces them: each pod with the addresses addrs gives
// it (none: the pod's own status), and the Services with the
// EndpointSlices the agent computes from those pods (a pod without an
// address is no endpoint), within the limits of an agent with the eBPF
// dataplane translating Services (the default; the others bound no
// Service, which matters only beyond those maps' capacities). The objects
// of objs are not modified.
func ManifestSnapshot(objs *manifests.Objects, addrs func(*policyapi.Pod) ([]netip.Addr, error)) (*policy.Snapshot, error) {
	snap := &policy.Snapshot{Namespaces: objs.NamespaceMap(), Policies: objs.Policies, Services: objs.Services, Limits: policy.DefaultLimits}
	for _, p := range objs.Pods {
		as, err := addrs(p)
		if err != nil {
			return nil, err
		}
		if len(as) > 0 {
			c := *p
			c.Status.PodIP, c.Status.PodIPs = "", nil
			for _, a := range as {
				c.Status.PodIPs = append(c.Status.PodIPs, policyapi.PodIP{IP: a.String()})
			}
			p = &c
		}
		snap.Pods = append(snap.Pods, p)
	}
	snap.EndpointSlices = endpointslice.FromStatus(snap.Services, snap.Pods)
	return snap, nil
}
