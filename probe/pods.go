package probe

import (
	"fmt"

	"lockstep.dev/lockstep/agent/endpoints"
	"lockstep.dev/lockstep/agent/manifests"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// IPAnnotation pins a pod's addresses: the agent hands the pod this
// address (or these, an IPv4 and an IPv6 address separated by a comma)
// instead of the next free one, so hand-written expectations (ipBlock
// peers) can name it.
const IPAnnotation = endpoints.PinnedIPAnnotation

// FromPolicyPods converts manifest pods to the pods a probe creates. Pods
// with hostNetwork share their node's namespace and are not subject to
// NetworkPolicy; they are left out and named in skipped.
func FromPolicyPods(in []policyapi.Pod) (pods []Pod, skipped []string, err error) {
	for _, kp := range in {
		key := kp.Namespace + "/" + kp.Name
		if kp.Spec.HostNetwork {
			skipped = append(skipped, key)
			continue
		}
		p := Pod{Namespace: kp.Namespace, Name: kp.Name, UID: kp.UID}
		if text, ok := kp.Annotations[IPAnnotation]; ok {
			if p.WantIPs, err = endpoints.ParsePins(text); err != nil {
				return nil, nil, fmt.Errorf("pod %s: annotation %s: %w", key, IPAnnotation, err)
			}
		}
		for _, c := range kp.Spec.Containers {
			for _, cp := range c.Ports {
				if cp.ContainerPort < 1 || cp.ContainerPort > 65535 {
					return nil, nil, fmt.Errorf("pod %s: container %s: containerPort %d is not 1-65535", key, c.Name, cp.ContainerPort)
				}
				proto := Protocol(cp.Protocol)
				if proto == "" {
					proto = TCP
				}
				if proto.rank() > 2 {
					return nil, nil, fmt.Errorf("pod %s: container %s: protocol %q is not TCP, UDP or SCTP", key, c.Name, cp.Protocol)
				}
				p.Ports = append(p.Ports, Port{Port: uint16(cp.ContainerPort), Protocol: proto})
			}
		}
		p.Ports = normalisePorts(p.Ports)
		pods = append(pods, p)
	}
	return pods, skipped, nil
}

// LoadPods reads the Pods of a manifests directory (as the agent's
// --manifests reads it) and converts them with FromPolicyPods.
func LoadPods(dir string) (pods []Pod, skipped []string, err error) {
	objs, err := manifests.Load(dir)
	if err != nil {
		return nil, nil, err
	}
	in := make([]policyapi.Pod, len(objs.Pods))
	for i, p := range objs.Pods {
		in[i] = *p
	}
	return FromPolicyPods(in)
}
