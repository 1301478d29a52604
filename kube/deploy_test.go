package kube_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"lockstep.dev/lockstep/agent"
	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/cni/install"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

const deployDir = "../deploy"

// manifests is every object of the kustomization, decoded strictly: a
// misspelt field fails the test rather than being dropped by the API
// server.
type manifests struct {
	crds                map[string]map[string]any // by metadata.name
	serviceAccounts     []corev1.ServiceAccount
	clusterRoles        []rbacv1.ClusterRole
	roles               []rbacv1.Role
	clusterRoleBindings []rbacv1.ClusterRoleBinding
	roleBindings        []rbacv1.RoleBinding
	daemonSets          []appsv1.DaemonSet
	deployments         []appsv1.Deployment
	pdbs                []policyv1.PodDisruptionBudget
	ipPools             []v1alpha1.IPPool
	configMaps          []corev1.ConfigMap
	services            []corev1.Service
	admissionPolicies   []admissionv1.ValidatingAdmissionPolicy
	policyBindings      []admissionv1.ValidatingAdmissionPolicyBinding
}

func strict[T any](t *testing.T, where string, doc []byte) T {
	t.Helper()
	var v T
	if err := yaml.UnmarshalStrict(doc, &v); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	return v
}

func (m *manifests) load(t *testing.T, path string) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(raw)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return
		}
		if err != nil {
			t.Fatalf("read %s: %v", path, err)
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			t.Fatalf("%s document %d: %v", path, i, err)
		}
		if tm.Kind == "" {
			continue // an empty document
		}
		where := path + ": " + tm.Kind
		switch tm.Kind {
		case "CustomResourceDefinition":
			crd := strict[map[string]any](t, where, doc)
			if m.crds == nil {
				m.crds = map[string]map[string]any{}
			}
			m.crds[dig[string](t, crd, "metadata", "name")] = crd
		case "ServiceAccount":
			m.serviceAccounts = append(m.serviceAccounts, strict[corev1.ServiceAccount](t, where, doc))
		case "ClusterRole":
			m.clusterRoles = append(m.clusterRoles, strict[rbacv1.ClusterRole](t, where, doc))
		case "Role":
			m.roles = append(m.roles, strict[rbacv1.Role](t, where, doc))
		case "ClusterRoleBinding":
			m.clusterRoleBindings = append(m.clusterRoleBindings, strict[rbacv1.ClusterRoleBinding](t, where, doc))
		case "RoleBinding":
			m.roleBindings = append(m.roleBindings, strict[rbacv1.RoleBinding](t, where, doc))
		case "DaemonSet":
			m.daemonSets = append(m.daemonSets, strict[appsv1.DaemonSet](t, where, doc))
		case "Deployment":
			m.deployments = append(m.deployments, strict[appsv1.Deployment](t, where, doc))
		case "PodDisruptionBudget":
			m.pdbs = append(m.pdbs, strict[policyv1.PodDisruptionBudget](t, where, doc))
		case "IPPool":
			m.ipPools = append(m.ipPools, strict[v1alpha1.IPPool](t, where, doc))
		case "ConfigMap":
			m.configMaps = append(m.configMaps, strict[corev1.ConfigMap](t, where, doc))
		case "Service":
			m.services = append(m.services, strict[corev1.Service](t, where, doc))
		case "ValidatingAdmissionPolicy":
			m.admissionPolicies = append(m.admissionPolicies, strict[admissionv1.ValidatingAdmissionPolicy](t, where, doc))
		case "ValidatingAdmissionPolicyBinding":
			m.policyBindings = append(m.policyBindings, strict[admissionv1.ValidatingAdmissionPolicyBinding](t, where, doc))
		default:
			t.Fatalf("%s: kind %s is not checked by this test; add it", path, tm.Kind)
		}
	}
}

// dig walks a decoded YAML tree by keys.
func dig[T any](t *testing.T, v any, keys ...string) T {
	t.Helper()
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			t.Fatalf("at %q: not a mapping", k)
		}
		v = m[k]
	}
	out, ok := v.(T)
	if !ok {
		t.Fatalf("at %v: %T is not %T", keys, v, out)
	}
	return out
}

// loadKustomization reads deploy/kustomization.yaml and every file it
// lists.
func loadKustomization(t *testing.T) (*manifests, []string) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(deployDir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(raw, &k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	m := &manifests{}
	for _, res := range k.Resources {
		m.load(t, filepath.Join(deployDir, res))
	}
	return m, k.Resources
}

// can reports whether ServiceAccount ns/sa may do verb on resource (in
// group, named name, in namespace objNS or cluster-wide if empty) under
// the manifests' RBAC.
func (m *manifests) can(sa, ns, verb, group, resource, name, objNS string) bool {
	bound := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == sa && s.Namespace == ns
		})
	}
	var rules []rbacv1.PolicyRule
	for _, b := range m.clusterRoleBindings {
		if bound(b.Subjects) && b.RoleRef.Kind == "ClusterRole" {
			for _, r := range m.clusterRoles {
				if r.Name == b.RoleRef.Name {
					rules = append(rules, r.Rules...)
				}
			}
		}
	}
	for _, b := range m.roleBindings {
		if bound(b.Subjects) && b.Namespace == objNS && b.RoleRef.Kind == "Role" {
			for _, r := range m.roles {
				if r.Name == b.RoleRef.Name && r.Namespace == b.Namespace {
					rules = append(rules, r.Rules...)
				}
			}
		}
	}
	match := func(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }
	for _, r := range rules {
		if match(r.APIGroups, group) && match(r.Resources, resource) && match(r.Verbs, verb) &&
			(len(r.ResourceNames) == 0 || slices.Contains(r.ResourceNames, name)) {
			return true
		}
	}
	return false
}

const (
	namespace = "kube-system"
	agentSA   = "lockstep-agent"
	opSA      = "lockstep-operator"
	group     = v1alpha1.GroupName
)

func TestKustomizationListsEveryManifest(t *testing.T) {
	_, listed := loadKustomization(t)
	for _, glob := range []string{"*.yaml", "crds/*.yaml"} {
		files, err := filepath.Glob(filepath.Join(deployDir, glob))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			rel, _ := filepath.Rel(deployDir, f)
			if rel != "kustomization.yaml" && !slices.Contains(listed, rel) {
				t.Errorf("deploy/%s is not in deploy/kustomization.yaml resources; kubectl apply -k would skip it", rel)
			}
		}
	}
}

// TestRBACSplitsNodeIPAMOwnership checks the permissions the release
// handshake relies on: each side can write its own half of a NodeIPAM and
// cannot write the other's.
func TestRBACSplitsNodeIPAMOwnership(t *testing.T) {
	m, _ := loadKustomization(t)
	tests := []struct {
		sa, verb, group, resource, name, ns string
		want                                bool
	}{
		// The agent: reads what it enforces and its NodeIPAM, writes
		// only NodeIPAM status.
		{agentSA, "watch", "", "pods", "", "", true},
		{agentSA, "watch", "", "namespaces", "", "", true},
		{agentSA, "watch", "", "nodes", "", "", true},
		{agentSA, "watch", "networking.k8s.io", "networkpolicies", "", "", true},
		{agentSA, "list", "", "services", "", "", true},
		{agentSA, "watch", "", "services", "", "", true},
		{agentSA, "get", "discovery.k8s.io", "endpointslices", "", "", true},
		{agentSA, "list", "discovery.k8s.io", "endpointslices", "", "", true},
		{agentSA, "watch", "discovery.k8s.io", "endpointslices", "", "", true},
		{agentSA, "update", "", "services", "", "", false},
		{agentSA, "create", "discovery.k8s.io", "endpointslices", "", "", false},
		{agentSA, "watch", group, "nodeipams", "", "", true},
		{agentSA, "update", group, "nodeipams/status", "", "", true},
		{agentSA, "update", group, "nodeipams", "", "", false},
		{agentSA, "patch", group, "nodeipams", "", "", false},
		{agentSA, "create", group, "nodeipams", "", "", false},
		{agentSA, "delete", group, "nodeipams", "", "", false},
		{agentSA, "update", group, "ippools", "", "", false},
		{agentSA, "update", "", "nodes", "", "", false},
		// The operator: owns IPPools and NodeIPAM metadata and spec,
		// never NodeIPAM status.
		{opSA, "watch", "", "nodes", "", "", true},
		{opSA, "watch", "", "pods", "", "", true},
		{opSA, "create", group, "nodeipams", "", "", true},
		{opSA, "update", group, "nodeipams", "", "", true},
		{opSA, "delete", group, "nodeipams", "", "", true},
		{opSA, "update", group, "nodeipams/status", "", "", false},
		{opSA, "patch", group, "nodeipams/status", "", "", false},
		{opSA, "update", group, "ippools/status", "", "", true},
		{opSA, "update", "", "nodes", "", "", false},
		// Leader election on one Lease in its namespace.
		{opSA, "create", "coordination.k8s.io", "leases", "", namespace, true},
		{opSA, "update", "coordination.k8s.io", "leases", "lockstep-operator", namespace, true},
		{opSA, "update", "coordination.k8s.io", "leases", "kube-scheduler", namespace, false},
		{opSA, "update", "coordination.k8s.io", "leases", "lockstep-operator", "default", false},
	}
	for _, tt := range tests {
		if got := m.can(tt.sa, namespace, tt.verb, tt.group, tt.resource, tt.name, tt.ns); got != tt.want {
			t.Errorf("%s can %s %s.%s %q in %q = %v, want %v", tt.sa, tt.verb, tt.resource, tt.group, tt.name, tt.ns, got, tt.want)
		}
	}
	for _, sa := range []string{agentSA, opSA} {
		if !slices.ContainsFunc(m.serviceAccounts, func(s corev1.ServiceAccount) bool { return s.Name == sa && s.Namespace == namespace }) {
			t.Errorf("no ServiceAccount %s/%s", namespace, sa)
		}
	}
}

// nodeNameClaim is the user extra the API server fills, from a token bound
// to a pod, with the pod's node (Kubernetes 1.30+).
const nodeNameClaim = "authentication.kubernetes.io/node-name"

// TestAgentWritesOnlyItsOwnNodeIPAM checks the admission policy that makes
// NodeIPAM writes node-scoped: RBAC lets every agent write every node's
// status, so without it one compromised node could answer for another's
// blocks. The CEL itself is judged by a real API server in
// TestKubeAgentWritesOnlyItsOwnNodeIPAM; here, that the policy exists,
// matches what the agent can write, names the agent's ServiceAccount as
// the DaemonSet runs it, fails closed, and is bound to deny.
func TestAgentWritesOnlyItsOwnNodeIPAM(t *testing.T) {
	m, _ := loadKustomization(t)
	var ds *appsv1.DaemonSet
	for i := range m.daemonSets {
		if m.daemonSets[i].Spec.Template.Spec.ServiceAccountName == agentSA {
			ds = &m.daemonSets[i]
		}
	}
	if ds == nil {
		t.Fatal("no DaemonSet runs as the agent's ServiceAccount")
	}
	if a := ds.Spec.Template.Spec.AutomountServiceAccountToken; a != nil && !*a {
		t.Error("the agent does not mount its pod-bound token: the policy would refuse every write it makes")
	}
	username := "system:serviceaccount:" + ds.Namespace + ":" + agentSA

	var policy *admissionv1.ValidatingAdmissionPolicy
	for i, p := range m.admissionPolicies {
		if policyMatches(p, group, "nodeipams/status", admissionv1.Update) {
			if policy != nil {
				t.Fatalf("policies %s and %s both match NodeIPAM status writes; keep one", policy.Name, p.Name)
			}
			policy = &m.admissionPolicies[i]
		}
	}
	if policy == nil {
		t.Fatal("no ValidatingAdmissionPolicy matches updates of nodeipams/status: any node's agent can write every node's NodeIPAM status")
	}
	for _, op := range []admissionv1.OperationType{admissionv1.Create, admissionv1.Update, admissionv1.Delete} {
		for _, res := range []string{"nodeipams", "nodeipams/status"} {
			if !policyMatches(*policy, group, res, op) {
				t.Errorf("policy %s does not match %s of %s", policy.Name, op, res)
			}
		}
	}
	if policy.Spec.FailurePolicy == nil || *policy.Spec.FailurePolicy != admissionv1.Fail {
		t.Errorf("policy %s failurePolicy %v, want Fail: a policy that cannot be evaluated must refuse", policy.Name, policy.Spec.FailurePolicy)
	}
	if policy.Spec.ParamKind != nil {
		t.Errorf("policy %s takes parameters: a binding without them would make it fail or do nothing", policy.Name)
	}
	// The match condition must select the agent, as deployed, and only
	// by its name: the operator and people write NodeIPAMs too.
	if len(policy.Spec.MatchConditions) != 1 {
		t.Fatalf("policy %s has %d match conditions, want one selecting %s", policy.Name, len(policy.Spec.MatchConditions), username)
	}
	want := "request.userInfo.username == '" + username + "'"
	if got := policy.Spec.MatchConditions[0].Expression; got != want {
		t.Errorf("policy %s match condition %q, want %q (the agent's ServiceAccount as the DaemonSet runs it)", policy.Name, got, want)
	}
	if len(policy.Spec.Validations) != 1 {
		t.Fatalf("policy %s has %d validations, want one", policy.Name, len(policy.Spec.Validations))
	}
	v := policy.Spec.Validations[0]
	for _, part := range []string{"has(request.userInfo.extra) && '" + nodeNameClaim + "' in request.userInfo.extra", "request.userInfo.extra['" + nodeNameClaim + "'] == [request.name]"} {
		if !strings.Contains(v.Expression, part) {
			t.Errorf("policy %s validation %q does not contain %q: it must compare the token's node claim with the NodeIPAM's name, and refuse a token without one", policy.Name, v.Expression, part)
		}
	}
	if strings.Contains(v.Expression, "||") {
		t.Errorf("policy %s validation %q has an alternative: nothing but the node claim may let a write through", policy.Name, v.Expression)
	}

	var bound bool
	for _, b := range m.policyBindings {
		if b.Spec.PolicyName != policy.Name {
			continue
		}
		bound = true
		if !slices.Equal(b.Spec.ValidationActions, []admissionv1.ValidationAction{admissionv1.Deny}) {
			t.Errorf("binding %s actions %v, want [Deny]", b.Name, b.Spec.ValidationActions)
		}
		if b.Spec.MatchResources != nil || b.Spec.ParamRef != nil {
			t.Errorf("binding %s narrows the policy (matchResources or paramRef); it must apply everywhere", b.Name)
		}
	}
	if !bound {
		t.Errorf("no ValidatingAdmissionPolicyBinding for policy %s: an unbound policy does nothing", policy.Name)
	}
}

// policyMatches reports whether p's match constraints select operation op
// on resource (with its subresource) of group.
func policyMatches(p admissionv1.ValidatingAdmissionPolicy, group, resource string, op admissionv1.OperationType) bool {
	mc := p.Spec.MatchConstraints
	if mc == nil {
		return false
	}
	match := func(list []string, v string) bool { return slices.Contains(list, v) || slices.Contains(list, "*") }
	for _, r := range mc.ResourceRules {
		ops := make([]string, len(r.Operations))
		for i, o := range r.Operations {
			ops[i] = string(o)
		}
		if match(r.APIGroups, group) && match(r.Resources, resource) && match(ops, string(op)) {
			return true
		}
	}
	return false
}

func volumeHostPaths(spec corev1.PodSpec) map[string]string {
	paths := map[string]string{}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			paths[v.Name] = v.HostPath.Path
		}
	}
	return paths
}

// mountedHostPaths maps each mount path of c to the host path behind it.
func mountedHostPaths(spec corev1.PodSpec, c corev1.Container) map[string]string {
	vols := volumeHostPaths(spec)
	out := map[string]string{}
	for _, m := range c.VolumeMounts {
		out[m.MountPath] = vols[m.Name]
	}
	return out
}

func TestAgentDaemonSet(t *testing.T) {
	m, _ := loadKustomization(t)
	if len(m.daemonSets) != 1 {
		t.Fatalf("%d DaemonSets, want the agent's", len(m.daemonSets))
	}
	ds := m.daemonSets[0]
	spec := ds.Spec.Template.Spec
	if ds.Namespace != namespace || spec.ServiceAccountName != agentSA {
		t.Errorf("agent runs in %s as %s, want %s as %s", ds.Namespace, spec.ServiceAccountName, namespace, agentSA)
	}
	if !spec.HostNetwork {
		t.Error("agent is not in the host network namespace")
	}
	if !slices.ContainsFunc(spec.Tolerations, func(t corev1.Toleration) bool { return t.Key == "" && t.Operator == corev1.TolerationOpExists }) {
		t.Error("agent does not tolerate every taint: a tainted node would get no pod network")
	}

	if len(spec.InitContainers) != 2 {
		t.Fatalf("%d init containers, want mount-bpffs and install-cni", len(spec.InitContainers))
	}
	bpfDir := filepath.Dir(agent.DefaultBPFRoot)
	mount := spec.InitContainers[0]
	wantMount := []string{"mount-bpffs", "--mount-ns", "/hostproc/1/ns/mnt", bpfDir}
	if !slices.Equal(mount.Args, wantMount) || !slices.Equal(mount.Command, []string{"lockstep"}) {
		t.Errorf("first init container runs %v %v, want lockstep %v", mount.Command, mount.Args, wantMount)
	}
	if got := mountedHostPaths(spec, mount)["/hostproc"]; got != "/proc" {
		t.Errorf("mount-bpffs mounts host %q at /hostproc, want the host's /proc (PID 1's mount namespace)", got)
	}
	initC := spec.InitContainers[1]
	wantInstall := []string{"install-cni", "--cni-bin-dir", install.DefaultBinDir, "--cni-conf-dir", install.DefaultConfDir, "--cni-version", "$(CNI_VERSION)"}
	if !slices.Equal(initC.Args, wantInstall) || !slices.Equal(initC.Command, []string{"lockstep"}) {
		t.Errorf("init container runs %v %v, want lockstep %v", initC.Command, initC.Args, wantInstall)
	}
	for dir, host := range map[string]string{install.DefaultBinDir: install.DefaultBinDir, install.DefaultConfDir: install.DefaultConfDir} {
		if got := mountedHostPaths(spec, initC)[dir]; got != host {
			t.Errorf("install-cni mounts host %q at %s, want %s", got, dir, host)
		}
	}
	m.checkConfigRefs(t, initC)

	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want the agent", len(spec.Containers))
	}
	c := spec.Containers[0]
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Error("agent is not privileged")
	}
	for _, want := range []string{"agent", "--node-name=$(NODE_NAME)", "--dataplane=$(DATAPLANE)"} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("agent args %v lack %s", c.Args, want)
		}
	}
	if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool {
		return e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName"
	}) {
		t.Error("NODE_NAME is not taken from spec.nodeName")
	}
	m.checkConfigRefs(t, c)
	mounts := mountedHostPaths(spec, c)
	for _, dir := range []string{agent.DefaultStateDir, filepath.Dir(api.DefaultSocket), bpfDir} {
		if mounts[dir] != dir {
			t.Errorf("agent mounts host %q at %s, want the host's %s: its default path", mounts[dir], dir, dir)
		}
	}
	for _, v := range append(c.VolumeMounts, mount.VolumeMounts...) {
		if v.MountPropagation != nil && *v.MountPropagation != corev1.MountPropagationNone {
			t.Errorf("%s is mounted with %s propagation: containerd refuses it on hosts whose mounts are private (no systemd)", v.MountPath, *v.MountPropagation)
		}
	}
	port := ""
	for _, a := range c.Args {
		if addr, ok := strings.CutPrefix(a, "--metrics-addr="); ok {
			_, port, _ = net.SplitHostPort(addr)
		}
	}
	if port == "" {
		t.Fatal("the agent has no --metrics-addr: its health and metrics would be on loopback only")
	}
	for name, want := range map[string]struct {
		p    *corev1.Probe
		path string
	}{"startup": {c.StartupProbe, "/healthz"}, "liveness": {c.LivenessProbe, "/healthz"}, "readiness": {c.ReadinessProbe, "/readyz"}} {
		p := want.p
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want.path || strconv.Itoa(p.HTTPGet.Port.IntValue()) != port {
			t.Errorf("%s probe %+v does not check %s on the metrics port %s", name, p, want.path, port)
		}
	}
}

// checkConfigRefs fails t when c reads a key of a ConfigMap the manifests do
// not define.
func (m *manifests) checkConfigRefs(t *testing.T, c corev1.Container) {
	t.Helper()
	for _, e := range c.Env {
		if e.ValueFrom == nil || e.ValueFrom.ConfigMapKeyRef == nil {
			continue
		}
		ref := e.ValueFrom.ConfigMapKeyRef
		found := false
		for _, cm := range m.configMaps {
			if cm.Name == ref.Name && cm.Namespace == namespace {
				_, found = cm.Data[ref.Key]
			}
		}
		if !found {
			t.Errorf("%s reads %s from ConfigMap %s key %s, which deploy/ does not define", c.Name, e.Name, ref.Name, ref.Key)
		}
	}
}

func TestOperatorDeployment(t *testing.T) {
	m, _ := loadKustomization(t)
	if len(m.deployments) != 1 {
		t.Fatalf("%d Deployments, want the operator's", len(m.deployments))
	}
	d := m.deployments[0]
	spec := d.Spec.Template.Spec
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("operator replicas %v, want 2", d.Spec.Replicas)
	}
	if d.Namespace != namespace || spec.ServiceAccountName != opSA {
		t.Errorf("operator runs in %s as %s, want %s as %s", d.Namespace, spec.ServiceAccountName, namespace, opSA)
	}
	if !spec.HostNetwork {
		t.Error("operator is not host-network: it could not start before the pod network it creates")
	}
	c := spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "operator" {
		t.Errorf("operator args %v, want the operator subcommand", c.Args)
	}
	for _, env := range []string{"POD_NAME", "POD_NAMESPACE"} {
		if !slices.ContainsFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == env && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil }) {
			t.Errorf("operator has no %s from the downward API; leader election needs it", env)
		}
	}
	if len(m.pdbs) != 1 || m.pdbs[0].Namespace != namespace {
		t.Error("no PodDisruptionBudget keeps one operator replica up")
	}
	port := ""
	for _, a := range c.Args {
		if addr, ok := strings.CutPrefix(a, "--metrics-addr="); ok {
			_, port, _ = net.SplitHostPort(addr)
		}
	}
	for name, want := range map[string]struct {
		p    *corev1.Probe
		path string
	}{"liveness": {c.LivenessProbe, "/healthz"}, "readiness": {c.ReadinessProbe, "/readyz"}} {
		p := want.p
		if port == "" || p == nil || p.HTTPGet == nil || p.HTTPGet.Path != want.path || strconv.Itoa(p.HTTPGet.Port.IntValue()) != port {
			t.Errorf("operator %s probe %+v does not check %s on its --metrics-addr port %q", name, p, want.path, port)
		}
	}
}

// TestAgentMetricsService checks that Prometheus can find every agent: a
// Service selecting the agent's pods on the port its metrics listen on.
func TestAgentMetricsService(t *testing.T) {
	m, _ := loadKustomization(t)
	labels := m.daemonSets[0].Spec.Template.Labels
	for _, svc := range m.services {
		selects := len(svc.Spec.Selector) > 0
		for k, v := range svc.Spec.Selector {
			selects = selects && labels[k] == v
		}
		if selects && len(svc.Spec.Ports) == 1 && svc.Spec.Ports[0].Port == 9962 {
			return
		}
	}
	t.Error("no Service selects the agent pods on their metrics port 9962")
}

func TestImagesArePlaceholders(t *testing.T) {
	m, _ := loadKustomization(t)
	var specs []corev1.PodSpec
	for _, ds := range m.daemonSets {
		specs = append(specs, ds.Spec.Template.Spec)
	}
	for _, d := range m.deployments {
		specs = append(specs, d.Spec.Template.Spec)
	}
	for _, s := range specs {
		for _, c := range append(s.InitContainers, s.Containers...) {
			if c.Image != "lockstep:dev" {
				t.Errorf("container %s runs %q; the manifests use lockstep:dev and kustomize sets the real image", c.Name, c.Image)
			}
		}
	}
}

// TestCRDsMatchTypes checks the generated CRDs against the Go API: names,
// scope, the status subresource, and that each half of the release
// handshake accepts exactly its writer's states.
func TestCRDsMatchTypes(t *testing.T) {
	m, _ := loadKustomization(t)
	for _, resource := range []string{v1alpha1.IPPoolResource, v1alpha1.NodeIPAMResource} {
		name := resource + "." + v1alpha1.GroupName
		crd, ok := m.crds[name]
		if !ok {
			t.Fatalf("no CRD %s; run kube/generate.sh", name)
		}
		if got := dig[string](t, crd, "spec", "scope"); got != "Cluster" {
			t.Errorf("%s scope %s, want Cluster", name, got)
		}
		versions := dig[[]any](t, crd, "spec", "versions")
		if len(versions) != 1 || dig[string](t, versions[0], "name") != v1alpha1.SchemeGroupVersion.Version {
			t.Fatalf("%s versions %v, want only %s", name, versions, v1alpha1.SchemeGroupVersion.Version)
		}
		dig[map[string]any](t, versions[0], "subresources", "status")
	}

	schema := dig[map[string]any](t, dig[[]any](t, m.crds["nodeipams.lockstep.dev"], "spec", "versions")[0], "schema", "openAPIV3Schema")
	for _, half := range []struct {
		path []string
		want []v1alpha1.ReleaseState
	}{
		{[]string{"spec"}, []v1alpha1.ReleaseState{v1alpha1.MarkedForRelease, v1alpha1.Released}},
		{[]string{"status"}, []v1alpha1.ReleaseState{v1alpha1.ReadyForRelease, v1alpha1.DoNotRelease}},
	} {
		p := append([]string{"properties"}, half.path[0], "properties", "releases", "items", "properties", "state", "enum")
		var got []v1alpha1.ReleaseState
		for _, s := range dig[[]any](t, schema, p...) {
			got = append(got, v1alpha1.ReleaseState(s.(string)))
		}
		if !slices.Equal(got, half.want) {
			t.Errorf("%s.releases accepts %v, want %v", half.path[0], got, half.want)
		}
	}
}

// TestExamplePools keeps deploy/examples valid against the API types.
func TestExamplePools(t *testing.T) {
	m := &manifests{}
	m.load(t, filepath.Join(deployDir, "examples", "ippools.yaml"))
	if len(m.ipPools) == 0 {
		t.Fatal("no IPPool in deploy/examples/ippools.yaml")
	}
	for _, p := range m.ipPools {
		for _, c := range p.Spec.CIDRs {
			prefix, err := c.Prefix()
			if err != nil {
				t.Errorf("pool %s: %v", p.Name, err)
				continue
			}
			if int(p.Spec.BlockSize) < prefix.Bits() || int(p.Spec.BlockSize) > prefix.Addr().BitLen() {
				t.Errorf("pool %s: blockSize %d does not fit %s", p.Name, p.Spec.BlockSize, c)
			}
		}
	}
}

// TestUninstallDaemonSet checks deploy/uninstall/uninstall.yaml against the
// code: it runs lockstep uninstall with every host path the agent and
// install-cni write mounted where their defaults say, in the host network
// namespace, on every node.
func TestUninstallDaemonSet(t *testing.T) {
	m := &manifests{}
	m.load(t, filepath.Join(deployDir, "uninstall", "uninstall.yaml"))
	if len(m.daemonSets) != 1 {
		t.Fatalf("%d DaemonSets in uninstall.yaml, want one", len(m.daemonSets))
	}
	spec := m.daemonSets[0].Spec.Template.Spec
	if !spec.HostNetwork {
		t.Error("uninstall is not in the host network namespace: it would not see the node's filters, chains and routes")
	}
	if !slices.ContainsFunc(spec.Tolerations, func(t corev1.Toleration) bool { return t.Key == "" && t.Operator == corev1.TolerationOpExists }) {
		t.Error("uninstall does not tolerate every taint: a tainted node would keep lockstep's leftovers")
	}
	if len(spec.InitContainers) != 1 {
		t.Fatalf("%d init containers, want the uninstall", len(spec.InitContainers))
	}
	c := spec.InitContainers[0]
	if !slices.Equal(c.Command, []string{"lockstep"}) || len(c.Args) == 0 || c.Args[0] != "uninstall" {
		t.Errorf("init container runs %v %v, want lockstep uninstall", c.Command, c.Args)
	}
	if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
		t.Error("uninstall is not privileged: it could not remove filters, chains and pins")
	}
	mounts := mountedHostPaths(spec, c)
	for _, dir := range []string{install.DefaultBinDir, install.DefaultConfDir, agent.DefaultStateDir, filepath.Dir(api.DefaultSocket), filepath.Dir(agent.DefaultBPFRoot)} {
		if mounts[dir] != dir {
			t.Errorf("uninstall mounts host %q at %s, want the host's %s", mounts[dir], dir, dir)
		}
	}
}
