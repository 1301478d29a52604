package manifests

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// The example policy of the Kubernetes NetworkPolicy documentation,
// unchanged, with a pod and namespaces around it.
const docsExample = `# from kubernetes.io/docs/concepts/services-networking/network-policies/
apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: test-network-policy
  namespace: default
spec:
  podSelector:
    matchLabels:
      role: db
  policyTypes:
  - Ingress
  - Egress
  ingress:
  - from:
    - ipBlock:
        cidr: 172.17.0.0/16
        except:
        - 172.17.1.0/24
    - namespaceSelector:
        matchLabels:
          project: myproject
    - podSelector:
        matchLabels:
          role: frontend
    ports:
    - protocol: TCP
      port: 6379
  egress:
  - to:
    - ipBlock:
        cidr: 10.0.0.0/24
    ports:
    - protocol: TCP
      port: 5978
--- # the database
apiVersion: v1
kind: Pod
metadata:
  name: db
  labels: {role: db}
  annotations: {note: "unknown fields below are ignored"}
spec:
  containers:
  - name: redis
    image: redis:7
    ports:
    - {name: redis, containerPort: 6379}
status:
  podIPs: [{ip: 10.0.0.5}]
---
---
apiVersion: v1
kind: ConfigMap
metadata: {name: db}
`

const listJSON = `{
  "apiVersion": "v1",
  "kind": "List",
  "items": [
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "myproject", "labels": {"project": "myproject"}}},
    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default", "uid": "given-uid"}},
    {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
     "metadata": {"name": "dns", "namespace": "myproject"},
     "spec": {"podSelector": {}, "egress": [{"ports": [{"port": 53, "protocol": "UDP"}, {"port": "dns-tcp"}]}]}}
  ]
}`

func writeDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestLoad(t *testing.T) {
	dir := writeDir(t, map[string]string{
		"policy.yaml":      docsExample,
		"objects.json":     listJSON,
		"notes.txt":        "not a manifest",
		".#policy.yaml":    "garbage: [",
		"sub/ignored.yaml": "garbage: [",
		"empty.yml":        "# nothing here\n",
		"windows.yml":      "apiVersion: v1\r\nkind: Namespace\r\nmetadata:\r\n  name: crlf\r\n",
	})
	objs, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, ns := range objs.Namespaces {
		names = append(names, ns.Name)
	}
	if want := []string{"crlf", "default", "myproject"}; !reflect.DeepEqual(names, want) {
		t.Errorf("namespaces %v, want %v", names, want)
	}
	nss := objs.NamespaceMap()
	if ns := nss["myproject"]; ns == nil || ns.Labels["project"] != "myproject" || ns.Labels[policyapi.NamespaceNameLabel] != "myproject" {
		t.Errorf("namespace myproject = %+v, want its label plus the name label", ns)
	}
	if ns := nss["default"]; ns == nil || ns.UID != "given-uid" {
		t.Errorf("namespace default = %+v, want the given UID kept", ns)
	}
	if len(objs.Pods) != 1 || objs.Pods[0].Namespace != "default" || objs.Pods[0].Spec.Containers[0].Ports[0].Protocol != policyapi.TCP {
		t.Fatalf("pods = %+v, want db in default with TCP defaulted", objs.Pods)
	}
	if uid := objs.Pods[0].UID; len(uid) != 36 || uid[14] != '8' {
		t.Errorf("pod UID %q is not a derived version-8 UUID", uid)
	}
	if len(objs.Policies) != 2 || objs.Policies[0].Name != "test-network-policy" || objs.Policies[1].Name != "dns" {
		t.Fatalf("policies = %v, want test-network-policy then dns (sorted by namespace)", objs.Policies)
	}
	dns := objs.Policies[1]
	if want := []policyapi.PolicyType{policyapi.PolicyTypeIngress, policyapi.PolicyTypeEgress}; !reflect.DeepEqual(dns.Spec.PolicyTypes, want) {
		t.Errorf("dns policy types %v, want %v (defaulted: it has egress rules)", dns.Spec.PolicyTypes, want)
	}
	ports := dns.Spec.Egress[0].Ports
	if *ports[0].Protocol != policyapi.UDP || ports[0].Port.IntVal != 53 || *ports[1].Protocol != policyapi.TCP || ports[1].Port.StrVal != "dns-tcp" {
		t.Errorf("dns ports = %+v %+v", ports[0], ports[1])
	}
	ex := objs.Policies[0].Spec.Ingress[0].From[0].IPBlock
	if ex == nil || ex.CIDR != "172.17.0.0/16" || !reflect.DeepEqual(ex.Except, []string{"172.17.1.0/24"}) {
		t.Errorf("ipBlock = %+v", ex)
	}
	if len(objs.Warnings) != 1 || !strings.Contains(objs.Warnings[0], "policy.yaml document 4: skipped v1 ConfigMap") {
		t.Errorf("warnings = %q, want the ConfigMap in document 4 (after an empty one)", objs.Warnings)
	}

	again, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, objs) {
		t.Error("a second load of the same files differs (UIDs must be derived deterministically)")
	}
}

// TestLoadCompiles feeds the documentation example to the compiler.
func TestLoadCompiles(t *testing.T) {
	objs, err := Parse("policy.yaml", []byte(docsExample))
	if err != nil {
		t.Fatal(err)
	}
	s := &policy.Snapshot{Namespaces: objs.NamespaceMap(), Pods: objs.Pods, Policies: objs.Policies, Identities: map[string]policyapi.Peer{},
		Local: []policy.LocalEndpoint{{HostIfName: "lxc0", Namespace: "default", PodName: "db"}}}
	s.Identities[policyapi.IdentityKey(nil, objs.Pods[0])] = policyapi.FirstPodIdentity
	d, err := policy.Compile(s)
	if err != nil {
		t.Fatal(err)
	}
	ep := d.Endpoints["lxc0"]
	if !ep.IngressIsolated || !ep.EgressIsolated {
		t.Errorf("db not isolated: %+v", ep)
	}
	// The db pod is role=db, not role=frontend, and no pod is in
	// myproject; so only the two ipBlock rules remain: two classes.
	if len(ep.Rules) != 2 {
		t.Errorf("rules = %v, want one ingress and one egress class entry", ep.Rules)
	}
}

func TestLoadErrors(t *testing.T) {
	policyDoc := func(spec string) string {
		return "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p, namespace: team}\nspec:\n" + spec
	}
	for _, tc := range []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"yaml syntax", map[string]string{"a.yaml": "# fine\n---\nkind: [\n"}, "a.yaml document 2"},
		{"duplicate key", map[string]string{"a.yaml": "kind: Pod\nkind: Pod\n"}, "a.yaml document 1"},
		{"not an object", map[string]string{"a.yaml": "- 1\n- 2\n"}, "a.yaml document 1: not an object"},
		{"no kind", map[string]string{"a.yaml": "metadata: {name: x}\n"}, "a.yaml document 1: no kind"},
		{"wrong apiVersion", map[string]string{"a.yaml": "apiVersion: extensions/v1beta1\nkind: NetworkPolicy\nmetadata: {name: x}\n"}, `apiVersion "extensions/v1beta1", want "networking.k8s.io/v1"`},
		{"wrong type", map[string]string{"a.yaml": "apiVersion: v1\nkind: Pod\nmetadata: {name: [x]}\n"}, "a.yaml document 1"},
		{"no name", map[string]string{"a.yaml": "apiVersion: v1\nkind: Pod\nmetadata: {}\n"}, "metadata.name is required"},
		{"bad container port", map[string]string{"a.yaml": "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containers: [{ports: [{containerPort: 0}]}]}\n"}, "pod default/x: spec.containers[0].ports[0]: containerPort 0"},
		{"bad pod IP", map[string]string{"a.yaml": "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nstatus: {podIP: 10.0.0.256}\n"}, `pod default/x: address "10.0.0.256"`},
		{"port not int32", map[string]string{"a.yaml": policyDoc("  podSelector: {}\n  ingress: [{ports: [{port: 1.5}]}]\n")}, "a.yaml document 1"},
		{"duplicate across files", map[string]string{"a.yaml": policyDoc("  podSelector: {}\n"), "b.yaml": policyDoc("  podSelector: {}\n")},
			"b.yaml document 1: duplicate NetworkPolicy team/p (first in "},
		{"duplicate in a list", map[string]string{"a.json": `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"x"}},{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"x"}}]}`},
			"a.json document 1 item 2: duplicate Namespace x"},
		{"list in a list", map[string]string{"a.json": `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"List"}]}`}, "a List inside a List"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load(writeDir(t, tc.files))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("loading a missing directory succeeded")
	}
}

// TestLoadInvalidPolicyFailsClosed: a policy that does not compile no
// longer makes the whole directory unreadable (and the agent refuse to
// start): it is loaded with a warning naming file, document and policy,
// and the compiler fails it closed.
func TestLoadInvalidPolicyFailsClosed(t *testing.T) {
	policyDoc := func(spec string) string {
		return "apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p, namespace: team}\nspec:\n" + spec
	}
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"endPort below port", "---\n" + policyDoc("  podSelector: {}\n  ingress: [{ports: [{port: 80, endPort: 70}]}]\n"),
			"a.yaml document 2: networkpolicy team/p: spec.ingress[0]: ports[0]: endPort 70 is less than port 80"},
		{"bad operator", policyDoc("  podSelector: {matchExpressions: [{key: a, operator: Equals, values: [b]}]}\n"), "unknown operator"},
		{"cidr netip rejects", policyDoc("  podSelector: {}\n  ingress: [{from: [{ipBlock: {cidr: 'fe80::/64%eth0'}}]}]\n"), "ipBlock: cidr"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Load(writeDir(t, map[string]string{"a.yaml": tc.doc}))
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			if len(objs.Policies) != 1 || len(objs.Warnings) != 1 || !strings.Contains(objs.Warnings[0], tc.want) {
				t.Fatalf("policies %d, warnings %q; want the policy and a warning containing %q", len(objs.Policies), objs.Warnings, tc.want)
			}
			d, err := policy.Compile(&policy.Snapshot{Policies: objs.Policies})
			if err != nil || d.FailedPolicies["team/p"] == "" {
				t.Errorf("compile: %v, failed %v; want team/p to fail closed", err, d.FailedPolicies)
			}
		})
	}
}

func TestSplitDocuments(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"a: 1\n", []string{"a: 1\n"}},
		{"---\na: 1\n", []string{"", "a: 1\n"}},
		{"a: 1\n---\nb: 2", []string{"a: 1\n", "b: 2"}},
		{"a: 1\n--- # two\nb: 2\n---   \n", []string{"a: 1\n", "b: 2\n", ""}},
		{"a: '\n---x\n'\n", []string{"a: '\n---x\n'\n"}}, // not a separator
		{"a: 1\n ---\n", []string{"a: 1\n ---\n"}},       // indented: not a separator
	} {
		var got []string
		for _, d := range splitDocuments([]byte(tc.in)) {
			got = append(got, string(d))
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("splitDocuments(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestLoadServices(t *testing.T) {
	tests := []struct {
		name    string
		doc     string
		check   func(*testing.T, *policyapi.Service)
		wantErr string
	}{
		{
			name: "ClusterIP Service, defaulted as the API server does",
			doc: `apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: 10.96.0.10
  selector: {app: web}
  sessionAffinity: ClientIP
  ports:
  - {name: http, port: 80, targetPort: http}
  - {name: dns, port: 53, protocol: UDP}
`,
			check: func(t *testing.T, s *policyapi.Service) {
				sp := s.Spec
				if s.Namespace != "default" || sp.Type != policyapi.ServiceTypeClusterIP || !reflect.DeepEqual(sp.ClusterIPs, []string{"10.96.0.10"}) {
					t.Errorf("service %s/%s type %q clusterIPs %v", s.Namespace, s.Name, sp.Type, sp.ClusterIPs)
				}
				if sp.Ports[0].Protocol != policyapi.TCP || *sp.Ports[0].TargetPort != *policyapi.FromString("http") || *sp.Ports[1].TargetPort != *policyapi.FromInt(53) {
					t.Errorf("ports %+v %+v", sp.Ports[0], sp.Ports[1])
				}
				if c := sp.SessionAffinityConfig; c == nil || *c.ClientIP.TimeoutSeconds != 10800 {
					t.Errorf("affinity config %+v, want the default timeout", c)
				}
			},
		},
		{
			name: "dual stack",
			doc:  "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: prod}\nspec: {clusterIP: 10.96.0.10, clusterIPs: [10.96.0.10, 'fd00:96::10'], ports: [{port: 80}]}\n",
			check: func(t *testing.T, s *policyapi.Service) {
				if s.Namespace != "prod" || len(s.Spec.ClusterIPs) != 2 {
					t.Errorf("service %+v", s)
				}
			},
		},
		{
			name:  "headless",
			doc:   "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {clusterIP: None, ports: [{port: 80}]}\n",
			check: func(t *testing.T, s *policyapi.Service) {},
		},
		{
			name:  "ExternalName needs no ClusterIP",
			doc:   "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {type: ExternalName, externalName: web.example}\n",
			check: func(t *testing.T, s *policyapi.Service) {},
		},
		{
			name:    "no ClusterIP: refused, there is no allocator",
			doc:     "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {selector: {app: web}, ports: [{port: 80}]}\n",
			wantErr: "svc.yaml document 1: service default/web: spec.clusterIP is required in a manifest",
		},
		{
			name:    "no ClusterIP on a NodePort Service either",
			doc:     "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {type: NodePort, ports: [{port: 80}]}\n",
			wantErr: "spec.clusterIP is required",
		},
		{
			name:    "invalid: two unnamed ports",
			doc:     "apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {clusterIP: 10.96.0.10, ports: [{port: 80}, {port: 81}]}\n",
			wantErr: "svc.yaml document 1: service default/web: spec.ports[0].name: required",
		},
		{
			name:    "wrong apiVersion",
			doc:     "apiVersion: v2\nkind: Service\nmetadata: {name: web}\n",
			wantErr: `Service has apiVersion "v2", want "v1"`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Parse("svc.yaml", []byte(tc.doc))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(objs.Services) != 1 || len(objs.Warnings) != 0 {
				t.Fatalf("services %+v, warnings %q; want one Service", objs.Services, objs.Warnings)
			}
			tc.check(t, objs.Services[0])
		})
	}
	if _, err := Parse("svc.yaml", []byte("apiVersion: v1\nkind: Service\nmetadata: {name: web}\nspec: {ports: [{port: 80}]}\n")); !errors.Is(err, ErrNoClusterIP) {
		t.Errorf("a Service without a ClusterIP: %v, want ErrNoClusterIP", err)
	}
}
