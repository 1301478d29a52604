package source

import (
	"encoding/json"
	"net/netip"
	"testing"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	networkingv1 "lockstep.dev/lockstep/kube/api/networking/v1"
)

// FuzzConvertNetworkPolicy: whatever NetworkPolicy the API server hands
// over (here: whatever JSON decodes as one), conversion never panics and
// never drops it; the compiler never fails on it. A policy conversion
// reports as invalid fails closed: the pod it selects is isolated in the
// directions it declares and allows nothing there, and the reason is in
// Desired.FailedPolicies. One that converts cleanly is enforced: nothing
// fails, and the unrelated pod of another namespace is never touched.
func FuzzConvertNetworkPolicy(f *testing.F) {
	for _, seed := range []string{
		`{"metadata":{"name":"p","namespace":"team"},"spec":{"podSelector":{},"ingress":[{"from":[{"ipBlock":{"cidr":"10.0.0.0/8","except":["10.1.0.0/16"]}}],"ports":[{"port":80},{"port":8000,"endPort":8080,"protocol":"UDP"}]}]}}`,
		`{"metadata":{"name":"p","namespace":"team"},"spec":{"podSelector":{"matchLabels":{"app":"a"}},"policyTypes":["Egress"],"egress":[{"to":[{"ipBlock":{"cidr":"fe80::1%eth0/64"}}]}]}}`,
		`{"metadata":{"name":"p","namespace":"team"},"spec":{"podSelector":{"matchExpressions":[{"key":"app","operator":"Near"}]},"ingress":[{"ports":[{"port":"http"},{"port":0}]}]}}`,
		`{"metadata":{"name":"p","namespace":"team"},"spec":{"podSelector":{},"policyTypes":["Ingress","Sideways"]}}`,
		`{"metadata":{"name":"p","namespace":"team"},"spec":{"podSelector":{},"ingress":[{"ports":[{"port":1},{"port":3},{"port":5},{"port":7},{"port":9},{"port":11},{"port":13},{"port":15},{"port":17},{"port":19},{"port":21},{"port":23},{"port":25},{"port":27},{"port":29},{"port":31},{"port":33}]}]}}`,
	} {
		f.Add([]byte(seed))
	}
	a := &policyapi.Pod{ObjectMeta: policyapi.ObjectMeta{Namespace: "team", Name: "a", Labels: map[string]string{"app": "a"}},
		Status: policyapi.PodStatus{PodIPs: []policyapi.PodIP{{IP: "10.0.0.1"}}}}
	b := &policyapi.Pod{ObjectMeta: policyapi.ObjectMeta{Namespace: "other", Name: "b", Labels: map[string]string{"app": "a"}},
		Status: policyapi.PodStatus{PodIPs: []policyapi.PodIP{{IP: "10.0.0.2"}}}}
	snapshot := func(policies []*policyapi.NetworkPolicy) *policy.Snapshot {
		s := &policy.Snapshot{Pods: []*policyapi.Pod{a, b}, Policies: policies, Identities: map[string]policyapi.Peer{}, Limits: policy.DefaultLimits,
			Local: []policy.LocalEndpoint{
				{HostIfName: "lsa", Namespace: "team", PodName: "a", IPv4: netip.MustParseAddr("10.0.0.1")},
				{HostIfName: "lsb", Namespace: "other", PodName: "b", IPv4: netip.MustParseAddr("10.0.0.2")},
			}}
		s.Identities[policyapi.IdentityKey(nil, a)] = policyapi.FirstPodIdentity
		s.Identities[policyapi.IdentityKey(nil, b)] = policyapi.FirstPodIdentity + 1
		return s
	}
	base, err := policy.Compile(snapshot(nil))
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var np networkingv1.NetworkPolicy
		if err := json.Unmarshal(data, &np); err != nil {
			return
		}
		np.Namespace = "team" // the API server's: the policy lives where the pod a does
		if np.Name == "" {
			np.Name = "p"
		}
		out, convErr := ConvertNetworkPolicy(&np)
		if out == nil {
			t.Fatalf("converted to nothing (err %v): the policy would be dropped and its pods lose their isolation", convErr)
		}
		d, err := policy.Compile(snapshot([]*policyapi.NetworkPolicy{out}))
		if err != nil {
			t.Fatalf("compile: %v", err)
		}
		if d.Endpoints["lsb"].IngressIsolated != base.Endpoints["lsb"].IngressIsolated || d.Endpoints["lsb"].EgressIsolated != base.Endpoints["lsb"].EgressIsolated ||
			len(d.Endpoints["lsb"].Rules) != len(base.Endpoints["lsb"].Rules) {
			t.Fatalf("a policy of team changed the pod of other: %+v", d.Endpoints["lsb"])
		}
		why := d.FailedPolicies["team/"+np.Name]
		if (convErr != nil) != (why != "") {
			t.Fatalf("conversion error %v, but the compiler's failure is %q", convErr, why)
		}
		ep := d.Endpoints["lsa"]
		if convErr == nil {
			return
		}
		for dir, iso := range [2]bool{ep.IngressIsolated, ep.EgressIsolated} {
			if ep.Failed[dir] == "" {
				continue
			}
			if !iso {
				t.Fatalf("lsa fails %v closed (%s) but is not isolated", policyapi.Direction(dir), ep.Failed[dir])
			}
			for k := range ep.Rules {
				if int(k.Dir) == dir {
					t.Fatalf("lsa fails %v closed (%s) but has the rule %+v", policyapi.Direction(dir), ep.Failed[dir], k)
				}
			}
		}
	})
}
