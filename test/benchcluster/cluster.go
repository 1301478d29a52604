package benchcluster

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// The shape of the synthetic cluster: namespaces × apps × replicas remote
// pods (10k), one label set per app and so one identity per app (1k), one
// NetworkPolicy per app (1k).
const (
	Namespaces = 50
	Apps       = 20
	Replicas   = 10
	Teams      = 5
)

// Cluster is a synthetic set of Kubernetes objects, realistic enough that
// the compiler does the work a real cluster asks of it: namespaces with
// team labels, deployment-like pods (app, tier, pod-template-hash) with
// named container ports, and policies with a pod selector, ingress from
// pod and namespace selectors on numeric, ranged and named ports, and
// egress to DNS by name and to ipBlocks with excepts. Services and
// EndpointSlices are empty unless AddServices filled them.
type Cluster struct {
	Namespaces     []*policyapi.Namespace
	Pods           []*policyapi.Pod
	Policies       []*policyapi.NetworkPolicy
	Services       []*policyapi.Service
	EndpointSlices []*policyapi.EndpointSlice
}

// New builds the remote part of the cluster. Pod addresses are
// 10.(n>>16).(n>>8).n for the n-th pod, inside 10.0.0.0/16, apart from any
// pool a node under test hands out; the pods of app j in namespace i are
// the Replicas from index (i*Apps+j)*Replicas.
func New() *Cluster {
	c := &Cluster{}
	n := 0
	for i := range Namespaces {
		ns := NsName(i)
		c.Namespaces = append(c.Namespaces, &policyapi.Namespace{
			TypeMeta:   policyapi.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
			ObjectMeta: policyapi.ObjectMeta{Name: ns, Labels: map[string]string{"team": fmt.Sprintf("t%d", i%Teams), "env": []string{"prod", "staging"}[i%2]}},
		})
		for j := range Apps {
			for k := range Replicas {
				a := netip.AddrFrom4([4]byte{10, byte(n >> 16), byte(n >> 8), byte(n)})
				p := AppPod(ns, j, fmt.Sprintf("%s-%x-%d", AppName(j), 0x5f00+j, k))
				p.Status = policyapi.PodStatus{Phase: "Running", PodIP: a.String(), PodIPs: []policyapi.PodIP{{IP: a.String()}}}
				p.Spec.NodeName = "remote-node"
				c.Pods = append(c.Pods, p)
				n++
			}
			c.Policies = append(c.Policies, AppPolicy(ns, i, j, 0))
		}
	}
	return c
}

// NsName names namespace i.
func NsName(i int) string { return fmt.Sprintf("ns%d", i) }

// AppName names app j (in every namespace).
func AppName(j int) string { return fmt.Sprintf("app%d", j) }

// AppPod returns a pod of app j in ns, with the labels a Deployment gives
// it and a named HTTP (8000+j) and DNS port.
func AppPod(ns string, j int, name string) *policyapi.Pod {
	return &policyapi.Pod{
		TypeMeta: policyapi.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: policyapi.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			"app": AppName(j), "tier": fmt.Sprint(j % 3), "pod-template-hash": fmt.Sprintf("%x", 0x5f00+j),
		}},
		Spec: policyapi.PodSpec{Containers: []policyapi.Container{{Name: "main", Ports: []policyapi.ContainerPort{
			{Name: "http", ContainerPort: 8000 + int32(j)},
			{Name: "dns", ContainerPort: 53, Protocol: policyapi.UDP},
		}}}},
	}
}

// AppPolicy returns the policy of app j in namespace i (named ns).
// version changes the upper end of its port range, so that successive
// versions differ in the rules they compile to.
func AppPolicy(ns string, i, j, version int) *policyapi.NetworkPolicy {
	udp := policyapi.UDP
	endPort := int32(9100 + version%500)
	np := &policyapi.NetworkPolicy{
		TypeMeta:   policyapi.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: policyapi.ObjectMeta{Namespace: ns, Name: "allow-" + AppName(j)},
		Spec: policyapi.NetworkPolicySpec{
			PodSelector: policyapi.LabelSelector{MatchLabels: map[string]string{"app": AppName(j)}},
			Ingress: []policyapi.IngressRule{{
				Ports: []policyapi.NetworkPolicyPort{{Port: policyapi.FromString("http")}, {Port: policyapi.FromInt(9000), EndPort: &endPort}},
				From: []policyapi.NetworkPolicyPeer{
					{PodSelector: &policyapi.LabelSelector{MatchLabels: map[string]string{"app": AppName((j + 1) % Apps)}}},
					{
						NamespaceSelector: &policyapi.LabelSelector{MatchLabels: map[string]string{"team": fmt.Sprintf("t%d", j%Teams)}},
						PodSelector: &policyapi.LabelSelector{MatchExpressions: []policyapi.LabelSelectorRequirement{
							{Key: "tier", Operator: policyapi.OpIn, Values: []string{"0", "1"}},
						}},
					},
				},
			}},
			Egress: []policyapi.EgressRule{
				{Ports: []policyapi.NetworkPolicyPort{{Protocol: &udp, Port: policyapi.FromString("dns")}}, To: []policyapi.NetworkPolicyPeer{{NamespaceSelector: &policyapi.LabelSelector{}}}},
				{To: []policyapi.NetworkPolicyPeer{{PodSelector: &policyapi.LabelSelector{MatchLabels: map[string]string{"tier": "2"}}}}},
			},
			PolicyTypes: []policyapi.PolicyType{policyapi.PolicyTypeIngress, policyapi.PolicyTypeEgress},
		},
	}
	if j%4 == 0 {
		// Every fourth app also talks to an external range.
		np.Spec.Egress = append(np.Spec.Egress, policyapi.EgressRule{
			Ports: []policyapi.NetworkPolicyPort{{Port: policyapi.FromInt(443)}},
			To: []policyapi.NetworkPolicyPeer{{IPBlock: &policyapi.IPBlock{
				CIDR: fmt.Sprintf("172.%d.0.0/16", 16+j), Except: []string{fmt.Sprintf("172.%d.%d.0/24", 16+j, i)},
			}}},
		})
	}
	return np
}

// list is a Kubernetes v1 List, the form the manifest files are written in.
type list struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Items      []any  `json:"items"`
}

// WriteManifests writes the cluster plus extra objects as one JSON v1
// List into dir/cluster.json, for an agent's --manifests. EndpointSlices
// are left out: a standalone agent computes them from the Services.
func WriteManifests(dir string, c *Cluster, extra ...any) error {
	l := list{APIVersion: "v1", Kind: "List"}
	for _, ns := range c.Namespaces {
		l.Items = append(l.Items, ns)
	}
	for _, p := range c.Pods {
		l.Items = append(l.Items, p)
	}
	for _, np := range c.Policies {
		l.Items = append(l.Items, np)
	}
	for _, svc := range c.Services {
		l.Items = append(l.Items, svc)
	}
	l.Items = append(l.Items, extra...)
	b, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("encode manifests: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create manifest directory: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cluster.json"), b, 0o600); err != nil {
		return fmt.Errorf("write manifests: %w", err)
	}
	return nil
}
