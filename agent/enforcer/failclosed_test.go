package enforcer

import (
	"context"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/store"
)

// TestOnePolicyCannotStopTheNode: a policy that cannot be enforced (more
// port ranges than a rule holds, or than its namespace's budget, a CIDR
// netip rejects, tens of thousands of except prefixes in a policy that
// selects no pod) used to fail every
// apply: each later CNI ADD on the node failed, whoever's pod it was.
// Now the apply succeeds, an unrelated pod's ADD is enforced, the pods
// the policy selects fail closed and Failures says why.
func TestOnePolicyCannotStopTheNode(t *testing.T) {
	var manyPorts []policyapi.NetworkPolicyPort
	for i := range int32(policy.MaxPortRanges + 1) {
		manyPorts = append(manyPorts, policyapi.NetworkPolicyPort{Port: policyapi.FromInt(1000 + 2*i)})
	}
	huge := &policyapi.IPBlock{CIDR: "10.0.0.0/8"}
	for i := range 20000 {
		huge.Except = append(huge.Except, fmt.Sprintf("10.%d.%d.0/24", i/256, i%256))
	}
	for _, tc := range []struct {
		name string
		bad  *policyapi.NetworkPolicy
		// failedPolicy is the policy reported failed ("" none); aFails,
		// whether team/a's ingress fails closed.
		failedPolicy string
		aFails       bool
		// local is whether the failed policy selects a pod of the node,
		// and so is one it reports (Failures.Local).
		local bool
		// roomy lifts the namespace's rule budget, which the ports alone
		// would exceed: the rule's ranges are what fails.
		roomy bool
	}{
		{
			name: "more port ranges than a rule holds",
			bad: &policyapi.NetworkPolicy{ObjectMeta: policyapi.ObjectMeta{Namespace: "team", Name: "ports"},
				Spec: policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{{Ports: manyPorts}}}},
			aFails: true,
			roomy:  true,
		},
		{
			name: "more port ranges than a namespace's rule budget",
			bad: &policyapi.NetworkPolicy{ObjectMeta: policyapi.ObjectMeta{Namespace: "team", Name: "ports"},
				Spec: policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{{Ports: manyPorts}}}},
			failedPolicy: "team/ports",
			aFails:       true,
			local:        true,
		},
		{
			name: "a cidr netip rejects",
			bad: &policyapi.NetworkPolicy{ObjectMeta: policyapi.ObjectMeta{Namespace: "team", Name: "cidr"},
				Spec: policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{{From: []policyapi.NetworkPolicyPeer{{IPBlock: &policyapi.IPBlock{CIDR: "10.0.0.0/8 "}}}}}}},
			failedPolicy: "team/cidr",
			aFails:       true,
			local:        true,
		},
		{
			name: "tens of thousands of excepts, selecting no pod",
			bad: &policyapi.NetworkPolicy{ObjectMeta: policyapi.ObjectMeta{Namespace: "team", Name: "excepts"},
				Spec: policyapi.NetworkPolicySpec{PodSelector: policyapi.LabelSelector{MatchLabels: map[string]string{"app": "nobody"}},
					Ingress: []policyapi.IngressRule{{From: []policyapi.NetworkPolicyPeer{{IPBlock: huge}}}}}},
			failedPolicy: "team/excepts", // over its namespace's budget; it selects no pod here
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := store.New()
			if err != nil {
				t.Fatal(err)
			}
			write := func(fn func(*store.Txn) error) {
				t.Helper()
				if err := st.Update(fn); err != nil {
					t.Fatal(err)
				}
			}
			addPod := func(txn *store.Txn, ns, name, hostIf string, ip netip.Addr) error {
				if err := store.AttachEndpoint(txn, &store.Endpoint{
					Attachment: store.Attachment{ContainerID: "c-" + name, IfName: "eth0"}, HostIfName: hostIf, State: store.EndpointReady,
					Pod:       store.PodRef{Namespace: ns, Name: name},
					Addresses: []store.AddressRef{{Pool: "v4", Addr: ip, Bits: 24}},
				}); err != nil {
					return err
				}
				return store.UpsertPod(txn, &policyapi.Pod{ObjectMeta: policyapi.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": name}}})
			}
			write(func(txn *store.Txn) error {
				if err := addPod(txn, "team", "a", "lsa", netip.MustParseAddr("10.244.0.2")); err != nil {
					return err
				}
				if err := addPod(txn, "other", "b", "lsb", netip.MustParseAddr("10.244.0.3")); err != nil {
					return err
				}
				return store.UpsertPolicy(txn, &policyapi.NetworkPolicy{ObjectMeta: policyapi.ObjectMeta{Namespace: "other", Name: "b"},
					Spec: policyapi.NetworkPolicySpec{Ingress: []policyapi.IngressRule{{Ports: []policyapi.NetworkPolicyPort{{Port: policyapi.FromInt(443)}}}}}})
			})
			dp := &historyDataplane{}
			e := New(st, dp, nil)
			if tc.roomy {
				l := policy.DefaultLimits
				l.RulesPerNamespace = 2 * policy.MaxPortRanges
				e.SetLimits(l)
			}
			var heard []Failures
			e.OnFailures(func(f Failures) { heard = append(heard, f) })
			ctx := context.Background()
			if err := e.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			before := dp.states()[len(dp.states())-1]

			write(func(txn *store.Txn) error { return store.UpsertPolicy(txn, tc.bad) })
			if err := e.Sync(ctx); err != nil {
				t.Fatalf("apply with the bad policy: %v", err)
			}
			// Another tenant's pod is added: its ADD waits for this Sync.
			write(func(txn *store.Txn) error {
				return addPod(txn, "other", "c", "lsc", netip.MustParseAddr("10.244.0.4"))
			})
			if err := e.Sync(ctx); err != nil || !e.Enforced("lsc") {
				t.Fatalf("unrelated pod's ADD: sync %v, enforced %v", err, e.Enforced("lsc"))
			}
			after := dp.states()[len(dp.states())-1]
			if after.Endpoints["lsb"] != before.Endpoints["lsb"] {
				t.Errorf("lsb, selected by no bad policy, changed: %+v, was %+v", after.Endpoints["lsb"], before.Endpoints["lsb"])
			}
			if c := after.Endpoints["lsc"]; c == nil || !c.IngressIsolated || c.Failed != [2]string{} {
				t.Errorf("lsc: %+v, want isolated by other/b with nothing failed", c)
			}
			if len(after.CIDRs) != len(before.CIDRs) {
				t.Errorf("CIDRs: %d entries, %d before the bad policy", len(after.CIDRs), len(before.CIDRs))
			}
			a := after.Endpoints["lsa"]
			if tc.aFails != (a.Failed[policyapi.Ingress] != "") || (tc.aFails && (!a.IngressIsolated || len(a.Rules) != 0)) {
				t.Errorf("lsa: %+v; want failed closed %v", a, tc.aFails)
			}
			f := e.Failures()
			if tc.failedPolicy != "" && f.Policies[tc.failedPolicy] == "" {
				t.Errorf("failures %+v: want policy %s", f, tc.failedPolicy)
			}
			var wantLocal map[string]string
			if tc.local {
				wantLocal = map[string]string{tc.failedPolicy: f.Policies[tc.failedPolicy]}
			}
			if !reflect.DeepEqual(f.Local, wantLocal) {
				t.Errorf("failures %+v: local %v, want %v", f, f.Local, wantLocal)
			}
			if len(heard) == 0 || !reflect.DeepEqual(heard[len(heard)-1], f) {
				t.Errorf("OnFailures heard %+v, want the last to be %+v", heard, f)
			}
			if tc.aFails && (len(f.Endpoints) != 1 || f.Endpoints[0].HostIf != "lsa" || !strings.Contains(f.Endpoints[0].Reasons[policyapi.Ingress], "team/")) {
				t.Errorf("failures %+v: want endpoint lsa, ingress, naming a policy of team", f)
			}

			write(func(txn *store.Txn) error { return store.DeletePolicy(txn, tc.bad.Namespace, tc.bad.Name) })
			if err := e.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if f := e.Failures(); !f.Empty() {
				t.Errorf("after deleting the bad policy: failures %+v, want none", f)
			}
			if len(heard) == 0 || !heard[len(heard)-1].Empty() {
				t.Errorf("after deleting the bad policy: OnFailures heard %+v, want the last empty", heard)
			}
		})
	}
}
