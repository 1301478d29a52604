package api

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// IdentityKey returns the canonical key of the identity pod has in ns: its
// namespace's name and labels, its own labels, and its named container
// ports. Pods with equal keys are indistinguishable to every policy, so
// they share one numeric identity (the caller assigns them; see
// [Snapshot.Identities]). Named ports are part of the key because an
// egress rule's named port resolves against each destination pod's own
// ports: two pods with the same labels but "http" on different numbers
// need different identities.
//
// ns may be nil (a namespace the caller has no object for); the namespace
// labels are then {kubernetes.io/metadata.name: pod's namespace}, which is
// also added to an object that lacks it. A pod's empty namespace means
// "default". The key is deterministic: maps are written in sorted order
// and every string is quoted.
func IdentityKey(ns *Namespace, pod *Pod) string {
	return string(AppendPodKey(AppendNamespaceKey(nil, PodNamespace(pod), ns), pod))
}

// AppendNamespaceKey appends the namespace part of an identity key; the
// compiler computes it once per namespace.
func AppendNamespaceKey(b []byte, name string, ns *Namespace) []byte {
	b = append(b, "ns="...)
	b = strconv.AppendQuote(b, name)
	b = append(b, " nsl="...)
	return appendLabels(b, NamespaceLabels(name, ns))
}

// AppendPodKey appends the pod part of an identity key.
func AppendPodKey(b []byte, pod *Pod) []byte {
	b = append(b, " l="...)
	b = appendLabels(b, pod.Labels)
	b = append(b, " p="...)
	for i, np := range NamedPorts(pod) {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, np.Name)
		b = append(b, '/')
		b = strconv.AppendUint(b, uint64(np.Proto), 10)
		b = append(b, '/')
		b = strconv.AppendUint(b, uint64(np.Port), 10)
	}
	return b
}

func appendLabels(b []byte, labels map[string]string) []byte {
	keys := make([]string, 0, len(labels))
	for k := range labels {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendQuote(b, k)
		b = append(b, ':')
		b = strconv.AppendQuote(b, labels[k])
	}
	return append(b, '}')
}

// PodNamespace returns the pod's namespace, "default" when empty.
func PodNamespace(p *Pod) string {
	if p.Namespace == "" {
		return "default"
	}
	return p.Namespace
}

// NamespaceLabels returns the labels of namespace name: those of ns (nil
// when the caller has no object) plus kubernetes.io/metadata.name. The
// result must not be modified; it may be ns.Labels itself.
func NamespaceLabels(name string, ns *Namespace) map[string]string {
	if ns == nil {
		return map[string]string{NamespaceNameLabel: name}
	}
	if v, ok := ns.Labels[NamespaceNameLabel]; ok && v == name {
		return ns.Labels
	}
	labels := make(map[string]string, len(ns.Labels)+1)
	for k, v := range ns.Labels {
		labels[k] = v
	}
	labels[NamespaceNameLabel] = name
	return labels
}

// NamedPort is one named container port, protocol numbered.
type NamedPort struct {
	Name  string
	Proto uint8
	Port  uint16
}

// NamedPorts returns the pod's named container ports, sorted and without
// duplicates. Ports with an unknown protocol or out-of-range number are
// left out: nothing can match them.
func NamedPorts(p *Pod) []NamedPort {
	var out []NamedPort
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == "" || cp.ContainerPort < 1 || cp.ContainerPort > 65535 {
				continue
			}
			proto, err := cp.Protocol.Number()
			if err != nil {
				continue
			}
			out = append(out, NamedPort{cp.Name, proto, uint16(cp.ContainerPort)})
		}
	}
	slices.SortFunc(out, func(a, b NamedPort) int {
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		if a.Proto != b.Proto {
			return int(a.Proto) - int(b.Proto)
		}
		return int(a.Port) - int(b.Port)
	})
	return slices.Compact(out)
}

// ResolveNamedPort returns the port numbers ports gives name under proto
// (normally one; a pod that declares a name twice yields both).
func ResolveNamedPort(ports []NamedPort, name string, proto uint8) []uint16 {
	var out []uint16
	for _, np := range ports {
		if np.Name == name && np.Proto == proto {
			out = append(out, np.Port)
		}
	}
	return out
}

// PodAddrs returns the pod's addresses, unmapped and deduplicated: those
// of Status.PodIPs, or Status.PodIP when PodIPs is empty.
func PodAddrs(p *Pod) ([]netip.Addr, error) {
	var out []netip.Addr
	add := func(s string) error {
		a, err := netip.ParseAddr(s)
		if err != nil {
			return fmt.Errorf("pod %s/%s: address %q: %w", PodNamespace(p), p.Name, s, err)
		}
		a = a.Unmap().WithZone("")
		if !slices.Contains(out, a) {
			out = append(out, a)
		}
		return nil
	}
	if len(p.Status.PodIPs) == 0 && p.Status.PodIP != "" {
		if err := add(p.Status.PodIP); err != nil {
			return nil, err
		}
		return out, nil
	}
	for _, ip := range p.Status.PodIPs {
		if err := add(ip.IP); err != nil {
			return nil, err
		}
	}
	return out, nil
}
