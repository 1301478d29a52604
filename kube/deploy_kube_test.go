//go:build linux

package kube_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"lockstep.dev/lockstep/internal/kubetest"
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
	for _, want := range []string{"ippools.lockstep.dev", "nodeipams.lockstep.dev", "daemonset.apps/lockstep-agent", "deployment.apps/lockstep-operator"} {
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
