//go:build linux

package kubetest_test

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"lockstep.dev/lockstep/test/kubetest"
)

// podManifest is a namespace and a pod already bound to a node: with no
// scheduler and no kubelet, the apiserver stores it and nothing else
// happens to it.
const podManifest = `apiVersion: v1
kind: Namespace
metadata:
  name: kubetest
---
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: kubetest
  labels:
    app: web
spec:
  nodeName: node-a
  containers:
  - name: web
    image: registry.invalid/web:1
`

// pod is the part of a Pod the tests read back.
type pod struct {
	Metadata struct {
		Name            string            `json:"name"`
		ResourceVersion string            `json:"resourceVersion"`
		Labels          map[string]string `json:"labels"`
	} `json:"metadata"`
	Spec struct {
		NodeName string `json:"nodeName"`
	} `json:"spec"`
	Status struct {
		Phase string `json:"phase"`
	} `json:"status"`
}

// TestKubeAPIServerRejectsStaleUpdate proves the Env is a real apiserver:
// it reports the pinned release, stores a pod bound to a node, and refuses
// an update written against a resourceVersion that is no longer current,
// the optimistic concurrency every lockstep writer must cope with.
func TestKubeAPIServerRejectsStaleUpdate(t *testing.T) {
	env := kubetest.Start(t)
	ctx := t.Context()

	t.Run("readyz", func(t *testing.T) {
		resp, err := env.HTTPClient().Get(env.Host + "/readyz?verbose")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "readyz check passed") {
			t.Fatalf("/readyz: %s\n%s", resp.Status, body)
		}
	})

	t.Run("version", func(t *testing.T) {
		want := pinnedVersion(t)
		out, err := env.Kubectl(ctx, nil, "get", "--raw", "/version")
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			GitVersion string `json:"gitVersion"`
		}
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("decode /version %s: %v", out, err)
		}
		if v.GitVersion != want {
			t.Errorf("server gitVersion = %q, want %q", v.GitVersion, want)
		}
		out, err = env.Kubectl(ctx, nil, "version", "--client", "-o", "json")
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(out), `"gitVersion": "`+want+`"`) {
			t.Errorf("kubectl client version is not %s:\n%s", want, out)
		}
	})

	if _, err := env.Kubectl(ctx, []byte(podManifest), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	stale := getPod(t, env)
	if stale.Spec.NodeName != "node-a" || stale.Metadata.ResourceVersion == "" || stale.Status.Phase != "Pending" {
		t.Fatalf("pod read back as nodeName=%q resourceVersion=%q phase=%q, want node-a, some, Pending",
			stale.Spec.NodeName, stale.Metadata.ResourceVersion, stale.Status.Phase)
	}
	staleJSON, err := env.Kubectl(ctx, nil, "get", "pod", "web", "-n", "kubetest", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}

	// Another writer gets in first.
	if _, err := env.Kubectl(ctx, nil, "label", "pod", "web", "-n", "kubetest", "writer=first"); err != nil {
		t.Fatal(err)
	}
	fresh := getPod(t, env)
	if fresh.Metadata.ResourceVersion == stale.Metadata.ResourceVersion {
		t.Fatalf("resourceVersion stayed %s across an update", fresh.Metadata.ResourceVersion)
	}

	// Our write, based on what we read before it, must be refused whole.
	update := strings.Replace(string(staleJSON), `"app": "web"`, `"app": "web", "writer": "second"`, 1)
	_, err = env.Kubectl(ctx, []byte(update), "replace", "-f", "-")
	if err == nil {
		t.Fatal("replace with a stale resourceVersion succeeded; the apiserver must answer Conflict")
	}
	if !strings.Contains(err.Error(), "(Conflict)") || !strings.Contains(err.Error(), "the object has been modified") {
		t.Fatalf("replace with a stale resourceVersion: want a Conflict, got: %v", err)
	}
	if got := getPod(t, env).Metadata.Labels["writer"]; got != "first" {
		t.Errorf("after the refused replace, label writer = %q, want first", got)
	}
}

// TestKubeRestartAPIServerKeepsState restarts the apiserver under a stored
// pod: the pod, the port and the credentials all survive, as they must for
// lockstep's "apiserver restarted" tests to mean anything.
func TestKubeRestartAPIServerKeepsState(t *testing.T) {
	env := kubetest.Start(t)
	ctx := t.Context()
	if _, err := env.Kubectl(ctx, []byte(podManifest), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	before := getPod(t, env)

	if err := env.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Kubectl(ctx, nil, "get", "--raw", "/readyz", "--request-timeout=2s"); err == nil {
		t.Fatal("apiserver still answers after StopAPIServer")
	}
	if err := env.StartAPIServer(ctx); err != nil {
		t.Fatal(err)
	}

	after := getPod(t, env)
	if after.Metadata.ResourceVersion != before.Metadata.ResourceVersion || after.Spec.NodeName != "node-a" {
		t.Fatalf("pod after restart: resourceVersion %s nodeName %q, want %s node-a",
			after.Metadata.ResourceVersion, after.Spec.NodeName, before.Metadata.ResourceVersion)
	}
}

// getPod reads kubetest/web back through kubectl.
func getPod(t *testing.T, env *kubetest.Env) pod {
	t.Helper()
	out, err := env.Kubectl(t.Context(), nil, "get", "pod", "web", "-n", "kubetest", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var p pod
	if err := json.Unmarshal(out, &p); err != nil {
		t.Fatalf("decode pod: %v\n%s", err, out)
	}
	return p
}

// pinnedVersion is the Kubernetes release tools/kube-testenv pins, read from
// its go.mod so the test and the build cannot disagree.
func pinnedVersion(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../tools/kube-testenv/go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?k8s\.io/kubernetes (v\S+)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("tools/kube-testenv/go.mod requires no k8s.io/kubernetes")
	}
	return string(m[1])
}
