package api

import "fmt"

// Default fills in what the API server defaults in a NetworkPolicy: every
// port's protocol (TCP) and the policy types ([Ingress], plus Egress when
// the policy has egress rules). The compiler applies the same defaults
// without calling Default, so objects from either source compile alike.
func (p *NetworkPolicy) Default() {
	p.Spec.PolicyTypes = PolicyTypes(&p.Spec)
	for i := range p.Spec.Ingress {
		defaultPorts(p.Spec.Ingress[i].Ports)
	}
	for i := range p.Spec.Egress {
		defaultPorts(p.Spec.Egress[i].Ports)
	}
}

func defaultPorts(ports []NetworkPolicyPort) {
	for i := range ports {
		if ports[i].Protocol == nil {
			tcp := TCP
			ports[i].Protocol = &tcp
		}
	}
}

// PolicyTypes returns the spec's policy types, defaulted as the API server
// does when none are given.
func PolicyTypes(spec *NetworkPolicySpec) []PolicyType {
	if len(spec.PolicyTypes) > 0 {
		return spec.PolicyTypes
	}
	if len(spec.Egress) > 0 {
		return []PolicyType{PolicyTypeIngress, PolicyTypeEgress}
	}
	return []PolicyType{PolicyTypeIngress}
}

// Validate reports the first reason the API server would reject p, naming
// the policy and the offending field.
func (p *NetworkPolicy) Validate() error {
	_, err := ParsePolicy(p)
	return err
}

// Default fills in what the API server defaults in a Pod: container port
// protocols (TCP).
func (p *Pod) Default() {
	for i := range p.Spec.Containers {
		for j := range p.Spec.Containers[i].Ports {
			if p.Spec.Containers[i].Ports[j].Protocol == "" {
				p.Spec.Containers[i].Ports[j].Protocol = TCP
			}
		}
	}
}

// Validate checks the parts of a Pod lockstep uses: its name, container
// ports and addresses.
func (p *Pod) Validate() error {
	if p.Name == "" {
		return fmt.Errorf("pod in namespace %q: metadata.name is required", p.Namespace)
	}
	for i, c := range p.Spec.Containers {
		for j, cp := range c.Ports {
			field := fmt.Sprintf("spec.containers[%d].ports[%d]", i, j)
			if cp.ContainerPort < 1 || cp.ContainerPort > 65535 {
				return fmt.Errorf("pod %s/%s: %s: containerPort %d out of range 1-65535", p.Namespace, p.Name, field, cp.ContainerPort)
			}
			if _, err := cp.Protocol.Number(); err != nil {
				return fmt.Errorf("pod %s/%s: %s: %w", p.Namespace, p.Name, field, err)
			}
			if cp.Name != "" && !isPortName(cp.Name) {
				return fmt.Errorf("pod %s/%s: %s: invalid port name %q", p.Namespace, p.Name, field, cp.Name)
			}
		}
	}
	if _, err := PodAddrs(p); err != nil {
		return err
	}
	return nil
}

// Default adds the kubernetes.io/metadata.name label, as the API server does.
func (n *Namespace) Default() {
	if n.Labels[NamespaceNameLabel] == n.Name {
		return
	}
	labels := make(map[string]string, len(n.Labels)+1)
	for k, v := range n.Labels {
		labels[k] = v
	}
	labels[NamespaceNameLabel] = n.Name
	n.Labels = labels
}

// Validate checks that the namespace has a name.
func (n *Namespace) Validate() error {
	if n.Name == "" {
		return fmt.Errorf("namespace: metadata.name is required")
	}
	return nil
}
