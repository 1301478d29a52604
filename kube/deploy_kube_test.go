//go:build linux

package kube_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "lockstep.dev/lockstep/kube/api/errors"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/types"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
	"lockstep.dev/lockstep/kube/client"
	"lockstep.dev/lockstep/test/kubetest"
)

// TestKubeDeployDryRunServer hands every manifest of deploy/ to a real
// kube-apiserver with --dry-run=server, so admission and schema validation
// (CRD structural schemas, CEL rules, RBAC, workload specs) judge them; then
// installs the CRDs for real and dry-runs the example pools against them.
func TestKubeDeployDryRunServer(t *testing.T) {
	env := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := env.Kubectl(ctx, nil, "apply", "--dry-run=server", "-k", deployDir)
	if err != nil {
		t.Fatalf("kubectl apply --dry-run=server -k deploy: %v\n%s", err, out)
	}
	for _, want := range []string{"ippools.lockstep.dev", "nodeipams.lockstep.dev", "daemonset.apps/lockstep-agent", "deployment.apps/lockstep-operator",
		"validatingadmissionpolicy.admissionregistration.k8s.io/lockstep-agent-own-nodeipam",
		"validatingadmissionpolicybinding.admissionregistration.k8s.io/lockstep-agent-own-nodeipam"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("dry run did not mention %s:\n%s", want, out)
		}
	}
	for _, crd := range []string{"crds/lockstep.dev_ippools.yaml", "crds/lockstep.dev_nodeipams.yaml"} {
		if out, err := env.Kubectl(ctx, nil, "apply", "--server-side", "-f", deployDir+"/"+crd); err != nil {
			t.Fatalf("install %s: %v\n%s", crd, err, out)
		}
	}
	if out, err := env.Kubectl(ctx, nil, "wait", "--for=condition=Established", "crd/ippools.lockstep.dev", "crd/nodeipams.lockstep.dev", "--timeout=30s"); err != nil {
		t.Fatalf("wait for the CRDs: %v\n%s", err, out)
	}
	if out, err := env.Kubectl(ctx, nil, "apply", "--dry-run=server", "-f", deployDir+"/examples/ippools.yaml"); err != nil {
		t.Fatalf("dry-run the example pools: %v\n%s", err, out)
	}
	// The CRD's validation must refuse what the API documents as invalid.
	bad := []byte("apiVersion: lockstep.dev/v1alpha1\nkind: IPPool\nmetadata:\n  name: bad\nspec:\n  cidrs: [\"10.244.0.1/16\"]\n  blockSize: 26\n")
	if out, err := env.Kubectl(ctx, bad, "apply", "--dry-run=server", "-f", "-"); err == nil {
		t.Errorf("a pool with a non-canonical CIDR passed server validation:\n%s", out)
	}
}

// TestKubeAgentWritesOnlyItsOwnNodeIPAM installs deploy/'s RBAC and its
// node-scoped-writes admission policy on a real kube-apiserver, so the
// policy's CEL is compiled and run by the API server itself, and writes
// NodeIPAM status as the agent's ServiceAccount with the node claim a
// pod-bound token carries (impersonated: this API server runs no
// kubelet). Its own node's status is written; another node's, and any
// without the claim, are refused; the operator is not affected.
func TestKubeAgentWritesOnlyItsOwnNodeIPAM(t *testing.T) {
	env := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, f := range []string{deployDir + "/crds", deployDir + "/rbac.yaml", deployDir + "/node-scoped-writes.yaml"} {
		if out, err := env.Kubectl(ctx, nil, "apply", "-f", f); err != nil {
			t.Fatalf("apply %s: %v\n%s", f, err, out)
		}
	}
	if out, err := env.Kubectl(ctx, nil, "wait", "--for=condition=Established", "crd/nodeipams.lockstep.dev", "--timeout=60s"); err != nil {
		t.Fatalf("wait for the CRD: %v\n%s", err, out)
	}
	admin, err := client.LoadConfig(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	as := func(sa string, extra map[string][]string) *client.Client {
		cfg := client.CopyConfig(admin)
		cfg.Impersonate = client.Impersonation{
			UserName: "system:serviceaccount:" + namespace + ":" + sa,
			Groups:   []string{"system:serviceaccounts", "system:serviceaccounts:" + namespace, "system:authenticated"},
			Extra:    extra,
		}
		c, err := client.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	adminC, err := client.NewForConfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"node-a", "node-b"} {
		var err error
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			// The CRD is established; discovery may lag a moment.
			if _, err = adminC.NodeIPAMs().Create(ctx, v1alpha1.NewNodeIPAM(name, types.UID("uid-"+name)), metav1.CreateOptions{}); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Fatalf("create nodeipam %s: %v", name, err)
		}
	}
	writeStatus := func(c *client.Client, name string) error {
		n, err := c.NodeIPAMs().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		now := metav1.Now()
		n.Status.LastReportTime = &now
		_, err = c.NodeIPAMs().UpdateStatus(ctx, n, metav1.UpdateOptions{})
		return err
	}
	agentA := as(agentSA, map[string][]string{nodeNameClaim: {"node-a"}})

	// The policy takes effect once the API server has loaded it.
	var last error
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if last = writeStatus(agentA, "node-b"); last != nil {
			break
		}
	}
	if !apierrors.IsForbidden(last) || !strings.Contains(last.Error(), "only the NodeIPAM of its own node") || !strings.Contains(last.Error(), "its token names node node-a") {
		t.Fatalf("node-a's agent wrote node-b's status, or was refused for another reason: %v", last)
	}
	tests := []struct {
		name   string
		c      *client.Client
		target string
		ok     bool
		says   string // part of the refusal
	}{
		{"own node", agentA, "node-a", true, ""},
		{"another node", agentA, "node-b", false, "this request is for node-b"},
		{"a token without the node claim", as(agentSA, nil), "node-a", false, "its token names no node"},
		{"a claim naming two nodes", as(agentSA, map[string][]string{nodeNameClaim: {"node-a", "node-b"}}), "node-b", false, "node-a,node-b"},
	}
	for _, tt := range tests {
		err := writeStatus(tt.c, tt.target)
		switch {
		case tt.ok && err != nil:
			t.Errorf("%s: status write of %s refused: %v", tt.name, tt.target, err)
		case !tt.ok && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tt.says)):
			t.Errorf("%s: status write of %s = %v, want forbidden saying %q", tt.name, tt.target, err, tt.says)
		}
	}
	// The operator writes specs of every node: the policy does not match it.
	op := as(opSA, nil)
	n, err := op.NodeIPAMs().Get(ctx, "node-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Labels = map[string]string{"touched": "by-operator"}
	if _, err := op.NodeIPAMs().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Errorf("the operator could not update node-b's NodeIPAM: %v", err)
	}
}
