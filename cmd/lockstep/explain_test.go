package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"lockstep.dev/lockstep/agent/explain"
	"lockstep.dev/lockstep/probe"
)

// runExplain runs `lockstep explain args...` on the demo's manifests.
func runExplain(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return runExplainOn(t, filepath.Join("..", "..", "examples", "demo"), args...)
}

// runExplainOn runs `lockstep explain --manifests dir args...`.
func runExplainOn(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := newExplainCmd()
	var out bytes.Buffer
	cmd.SetArgs(append([]string{"--manifests", dir}, args...))
	cmd.SetOut(&out)
	cmd.SetErr(&bytes.Buffer{})
	err := cmd.Execute()
	return out.String(), err
}

// TestExplainDemo walks the README's explain example: the demo's
// frontend reaches the backend through backend-allow-frontend, and the
// debug pod is refused by the db's policies, in every output format.
func TestExplainDemo(t *testing.T) {
	out, err := runExplain(t, "--from", "web/frontend", "--to", "api/backend", "--port", "8080")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Verdict: ALLOW", "api/backend-allow-frontend ingress[0]", "web/frontend (10.244.0.10)"} {
		if !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
			t.Errorf("table output lacks %q:\n%s", want, out)
		}
	}
	out, err = runExplain(t, "--from", "ops/debug", "--to", "data/db", "--port", "5432/tcp", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var res explain.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("decode -o json: %v\n%s", err, out)
	}
	if res.Verdict != explain.Deny || !res.Ingress.Isolated || len(res.Ingress.AllowedBy) != 0 || !strings.HasPrefix(res.Ingress.Reason, "default deny") {
		t.Errorf("ops/debug -> data/db: %+v, want a default deny on the db's ingress", res)
	}
	if !strings.Contains(out, `"allowedBy": []`) {
		t.Errorf("JSON field names are not lower camel case:\n%s", out)
	}
	yout, err := runExplain(t, "--from", "ops/debug", "--to", "data/db", "--port", "5432", "-o", "yaml")
	if err != nil {
		t.Fatal(err)
	}
	var fromYAML explain.Result
	if err := yaml.Unmarshal([]byte(yout), &fromYAML); err != nil {
		t.Fatalf("decode -o yaml: %v\n%s", err, yout)
	}
	if fromYAML.Reason != res.Reason || fromYAML.Ingress.Policies[0] != res.Ingress.Policies[0] {
		t.Errorf("yaml says %+v, json %+v", fromYAML, res)
	}
}

// explainServiceManifests is a Service x/web (10.96.0.20) in front of x/web-1
// (gate=open) and x/web-2 (gate=closed, its ingress isolated by
// deny-closed), and a Service x/later in front of x/late, which has no
// address yet.
const explainServiceManifests = `apiVersion: v1
kind: Namespace
metadata: {name: x}
---
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata: {name: deny-closed, namespace: x}
spec:
  podSelector: {matchLabels: {gate: closed}}
  policyTypes: [Ingress]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: x}
spec:
  clusterIP: 10.96.0.20
  selector: {app: web}
  ports: [{port: 80, targetPort: http}]
---
apiVersion: v1
kind: Service
metadata: {name: later, namespace: x}
spec:
  clusterIP: 10.96.0.21
  selector: {app: late}
  ports: [{port: 80}]
---
apiVersion: v1
kind: Pod
metadata: {name: client, namespace: x, labels: {app: client}, annotations: {lockstep.dev/ip: 10.244.0.1}}
spec: {containers: [{name: c, image: c}]}
---
apiVersion: v1
kind: Pod
metadata: {name: web-1, namespace: x, labels: {app: web, gate: open}, annotations: {lockstep.dev/ip: 10.244.0.11}}
spec: {containers: [{name: c, image: c, ports: [{name: http, containerPort: 8080}]}]}
---
apiVersion: v1
kind: Pod
metadata: {name: web-2, namespace: x, labels: {app: web, gate: closed}, annotations: {lockstep.dev/ip: 10.244.0.12}}
spec: {containers: [{name: c, image: c, ports: [{name: http, containerPort: 9090}]}]}
---
apiVersion: v1
kind: Pod
metadata: {name: late, namespace: x, labels: {app: late}}
spec: {containers: [{name: c, image: c}]}
`

// TestExplainService: --manifests translates a Service as the standalone
// agent would (its slices from the pods' pinned addresses, the named
// targetPort per pod) and judges each backend, in the table and in
// JSON; a Service whose pod has no address is refused, and says why.
func TestExplainService(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "manifests.yaml"), []byte(explainServiceManifests), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := runExplainOn(t, dir, "--from", "x/client", "--to", "svc/x/web", "--port", "80")
	if err != nil {
		t.Fatal(err)
	}
	flat := strings.Join(strings.Fields(out), " ")
	for _, want := range []string{
		"Connection: x/client (10.244.0.1) -> svc/x/web (10.96.0.20) on 80/TCP",
		"Verdict: PARTIAL",
		"Backend x/web-1 (10.244.0.11) on 8080/TCP: ALLOW",
		"Backend x/web-2 (10.244.0.12) on 9090/TCP: DENY",
		"Ingress of x/web-2: Isolated: yes Policies: x/deny-closed Allowed by: none",
	} {
		if !strings.Contains(flat, want) {
			t.Errorf("table output lacks %q:\n%s", want, out)
		}
	}
	out, err = runExplainOn(t, dir, "--from", "x/client", "--to", "10.96.0.20", "--port", "80", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var res explain.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("decode -o json: %v\n%s", err, out)
	}
	if res.Verdict != explain.Partial || res.To.Service != "x/web" || len(res.Backends) != 2 || res.Backends[1].Ingress.Verdict != explain.Deny {
		t.Errorf("x/client -> 10.96.0.20: %+v, want partial through x/web's two backends", res)
	}
	if strings.Contains(out, `"egress"`) && !strings.Contains(out, `"backends"`) {
		t.Errorf("a Service's answer has sides of its own:\n%s", out)
	}
	out, err = runExplainOn(t, dir, "--from", "x/client", "--to", "svc/x/later", "--port", "80")
	if err != nil {
		t.Fatal(err)
	}
	if flat := strings.Join(strings.Fields(out), " "); !strings.Contains(flat, "Verdict: REFUSED") || !strings.Contains(flat, "its selector picks x/late, without an IPv4 address") {
		t.Errorf("a Service whose pod has no address:\n%s", out)
	}
}

func TestExplainCommandErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--from", "web/frontend", "--to", "api/backend"}, "explain needs --from, --to and --port"},
		{[]string{"--from", "web/frontend", "--to", "api/nobody", "--port", "80"}, "no such pod api/nobody (the pods of namespace api are backend)"},
		{[]string{"--from", "frontend", "--to", "api/backend", "--port", "80"}, "want NAMESPACE/POD, svc/NAMESPACE/NAME, an address or a CIDR"},
		{[]string{"--from", "web/frontend", "--to", "api/backend", "--port", "80/icmp"}, "protocol must be tcp, udp or sctp"},
		{[]string{"--from", "web/frontend", "--to", "api/backend", "--port", "80", "-o", "wide"}, "want table, json or yaml"},
		{[]string{"--from", "web/frontend", "--to", "svc/api/backend", "--port", "80"}, "no such service api/backend (the Services of namespace api are none)"},
	} {
		if _, err := runExplain(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("explain %v: %v, want an error containing %q", tc.args, err, tc.want)
		}
	}
}

// TestProbeExpectMalformed: a malformed --expect file is an error before
// anything is probed (this test runs without root, so probing would fail
// differently).
func TestProbeExpectMalformed(t *testing.T) {
	dir := t.TempDir()
	for name, text := range map[string]string{
		"cells.txt": "80/TCP  x/a  x/b\nx/a  -  Y\n",
		"empty.txt": "# nothing\n",
		"bad.json":  "{\"pods\": 3}",
	} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := readExpected(path); err == nil || !strings.Contains(err.Error(), "--expect "+path) {
			t.Errorf("%s: %v, want an error naming --expect %s", name, err, path)
		}
	}
	if _, err := readExpected(filepath.Join(dir, "missing.txt")); err == nil {
		t.Error("a missing --expect file is no error")
	}
}

// TestCheckExpected: equal tables say "matches FILE"; differing ones list
// each differing cell and fail.
func TestCheckExpected(t *testing.T) {
	path := filepath.Join(t.TempDir(), "expected.txt")
	if err := os.WriteFile(path, []byte("80/TCP  x/a  x/b\nx/a     -    X\nx/b     .    -\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	expected, err := readExpected(path)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := checkExpected(&out, path, expected, expected); err != nil || out.String() != "matches "+path+"\n" {
		t.Errorf("equal tables: %v, %q", err, out.String())
	}
	actual := expected
	actual.Blocks = []probe.Block{expected.Blocks[0]}
	actual.Blocks[0].Cells = [][]byte{[]byte("-."), []byte(".-")}
	out.Reset()
	err = checkExpected(&out, path, expected, actual)
	if err == nil || !strings.Contains(err.Error(), "differ from "+path+" in 1 cells") {
		t.Errorf("differing tables: %v", err)
	}
	if lines := strings.Split(strings.TrimSpace(out.String()), "\n"); len(lines) != 3 || strings.Join(strings.Fields(lines[2]), " ") != "x/a x/b 80/TCP X ." {
		t.Errorf("differing cells printed as:\n%s", out.String())
	}
}
