package source

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"lockstep.dev/lockstep/agent/routes"
	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/types"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

func node(name, uid string, addrs ...corev1.NodeAddress) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(uid)}, Status: corev1.NodeStatus{Addresses: addrs}}
}

func internal(ip string) corev1.NodeAddress {
	return corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip}
}

func nodeIPAM(name, ownerUID string, blocks ...string) *v1alpha1.NodeIPAM {
	n := v1alpha1.NewNodeIPAM(name, types.UID(ownerUID))
	for _, b := range blocks {
		n.Spec.Blocks = append(n.Spec.Blocks, v1alpha1.Block{CIDR: v1alpha1.CIDR(b), Pool: "default"})
	}
	return n
}

func TestNodesView(t *testing.T) {
	pfx := netip.MustParsePrefix
	addr := netip.MustParseAddr
	tests := []struct {
		name         string
		nodes        []*corev1.Node
		ipams        []*v1alpha1.NodeIPAM
		wantSelfIPAM string // block of SelfIPAM, "" for none
		wantPeers    []routes.Peer
		wantProblems []string
	}{
		{
			name: "self and two peers",
			nodes: []*corev1.Node{
				node("a", "ua", internal("192.168.77.1")),
				node("c", "uc", corev1.NodeAddress{Type: corev1.NodeHostName, Address: "c"}, internal("192.168.77.3"), internal("fd00:77::3")),
				node("b", "ub", corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "203.0.113.2"}, internal("192.168.77.2")),
			},
			ipams: []*v1alpha1.NodeIPAM{
				nodeIPAM("a", "ua", "10.244.0.0/26"),
				nodeIPAM("b", "ub", "10.244.0.64/26", "10.244.1.0/26"),
				nodeIPAM("c", "uc", "fd00:10:244::/120"),
			},
			wantSelfIPAM: "10.244.0.0/26",
			wantPeers: []routes.Peer{
				{Node: "b", Addrs: []netip.Addr{addr("192.168.77.2")}, Blocks: []netip.Prefix{pfx("10.244.0.64/26"), pfx("10.244.1.0/26")}},
				{Node: "c", Addrs: []netip.Addr{addr("192.168.77.3"), addr("fd00:77::3")}, Blocks: []netip.Prefix{pfx("fd00:10:244::/120")}},
			},
		},
		{
			name:  "a NodeIPAM of a deleted node, or of an earlier node of the same name, is ignored",
			nodes: []*corev1.Node{node("a", "ua", internal("192.168.77.1")), node("b", "ub-new", internal("192.168.77.2"))},
			ipams: []*v1alpha1.NodeIPAM{
				nodeIPAM("a", "ua-old", "10.244.0.0/26"),
				nodeIPAM("b", "ub-old", "10.244.0.64/26"),
				nodeIPAM("gone", "ug", "10.244.0.128/26"),
			},
		},
		{
			name:      "a node without InternalIP is a peer without addresses",
			nodes:     []*corev1.Node{node("b", "ub")},
			ipams:     []*v1alpha1.NodeIPAM{nodeIPAM("b", "ub", "10.244.0.64/26")},
			wantPeers: []routes.Peer{{Node: "b", Blocks: []netip.Prefix{pfx("10.244.0.64/26")}}},
		},
		{
			name:         "unparsable address and block are reported and skipped",
			nodes:        []*corev1.Node{node("b", "ub", internal("not-an-ip"), internal("192.168.77.2"))},
			ipams:        []*v1alpha1.NodeIPAM{nodeIPAM("b", "ub", "10.244.0.65/26", "10.244.1.0/26")},
			wantPeers:    []routes.Peer{{Node: "b", Addrs: []netip.Addr{addr("192.168.77.2")}, Blocks: []netip.Prefix{pfx("10.244.1.0/26")}}},
			wantProblems: []string{"not-an-ip", "10.244.0.65/26"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := NodesView("a", tc.nodes, tc.ipams)
			if got.Self == nil && len(tc.nodes) > 0 && tc.nodes[0].Name == "a" {
				t.Error("Self not found")
			}
			gotSelf := ""
			if got.SelfIPAM != nil {
				gotSelf = string(got.SelfIPAM.Spec.Blocks[0].CIDR)
			}
			if gotSelf != tc.wantSelfIPAM {
				t.Errorf("SelfIPAM block = %q, want %q", gotSelf, tc.wantSelfIPAM)
			}
			if !reflect.DeepEqual(got.Peers, tc.wantPeers) {
				t.Errorf("Peers:\n got %+v\nwant %+v", got.Peers, tc.wantPeers)
			}
			if len(got.Problems) != len(tc.wantProblems) {
				t.Fatalf("Problems = %q, want ones mentioning %q", got.Problems, tc.wantProblems)
			}
			for i, w := range tc.wantProblems {
				if !strings.Contains(got.Problems[i], w) {
					t.Errorf("problem %d = %q, want it to mention %q", i, got.Problems[i], w)
				}
			}
		})
	}
}
