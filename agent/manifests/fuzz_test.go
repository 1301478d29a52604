package manifests

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	"lockstep.dev/lockstep/agent/endpointslice"
	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// serviceDocs is a Service with named and numbered target ports, and pods
// it selects, one without the named port.
const serviceDocs = `apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  clusterIP: 10.96.0.10
  clusterIPs: [10.96.0.10, 'fd00:96::10']
  selector: {app: web}
  sessionAffinity: ClientIP
  sessionAffinityConfig: {clientIP: {timeoutSeconds: 60}}
  ports: [{name: http, port: 80, targetPort: http}, {name: dns, port: 53, protocol: UDP, targetPort: 5353}]
---
apiVersion: v1
kind: Pod
metadata: {name: a, labels: {app: web}}
spec: {containers: [{ports: [{name: http, containerPort: 8080}]}]}
status: {podIPs: [{ip: 10.0.0.1}, {ip: 'fd00::1'}]}
---
apiVersion: v1
kind: Pod
metadata: {name: b, labels: {app: web}}
status: {podIP: 10.0.0.2}
`

// FuzzLoadDocument parses arbitrary bytes as one manifest file: it must
// never panic, and whatever it accepts must be valid and compile, the
// Services with the EndpointSlices the standalone agent computes for them
// from the pods' addresses.
func FuzzLoadDocument(f *testing.F) {
	f.Add([]byte(docsExample))
	f.Add([]byte(listJSON))
	f.Add([]byte("---\n---\n"))
	f.Add([]byte("apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {a: b}}\nspec: {containers: [{ports: [{name: http, containerPort: 80}]}]}\nstatus: {podIPs: [{ip: 10.0.0.1}, {ip: 'fd00::1'}]}\n"))
	f.Add([]byte("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p}\nspec:\n  podSelector: {matchExpressions: [{key: a, operator: NotIn, values: [x]}]}\n  egress: [{to: [{ipBlock: {cidr: '::/0', except: ['fd00::/8']}}], ports: [{port: 1, endPort: 65535, protocol: SCTP}]}]\n"))
	f.Add([]byte("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p}\nspec:\n  podSelector: {}\n  ingress: [{from: [{ipBlock: {cidr: '10.0.0.0/8', except: ['11.0.0.0/16']}}], ports: [{port: 0}]}]\n"))
	f.Add([]byte(serviceDocs))
	f.Add([]byte("apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {type: ExternalName, clusterIP: '10.0.0.1', ports: [{port: 1, targetPort: 0}]}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := Parse("fuzz.yaml", data)
		if err != nil {
			return
		}
		s := &policy.Snapshot{Namespaces: objs.NamespaceMap(), Pods: objs.Pods, Policies: objs.Policies, Identities: map[string]policyapi.Peer{},
			Services: objs.Services}
		var pods []endpointslice.Pod
		for _, p := range objs.Pods {
			var addrs []netip.Addr
			ips := p.Status.PodIPs
			if len(ips) == 0 && p.Status.PodIP != "" {
				ips = []policyapi.PodIP{{IP: p.Status.PodIP}}
			}
			for _, ip := range ips {
				addrs = append(addrs, netip.MustParseAddr(ip.IP)) // validated
			}
			pods = append(pods, endpointslice.Pod{Object: p, Addrs: addrs})
		}
		for _, svc := range objs.Services {
			for _, sl := range endpointslice.Slices(svc, pods) {
				if err := sl.Validate(); err != nil {
					t.Fatalf("computed slice of a loaded Service is invalid: %v", err)
				}
				s.EndpointSlices = append(s.EndpointSlices, sl)
			}
		}
		for _, p := range objs.Pods {
			key := policyapi.IdentityKey(s.Namespaces[p.Namespace], p)
			if _, ok := s.Identities[key]; !ok {
				s.Identities[key] = policyapi.FirstPodIdentity + policyapi.Peer(len(s.Identities))
			}
			s.Local = append(s.Local, policy.LocalEndpoint{HostIfName: p.Namespace + "/" + p.Name, Namespace: p.Namespace, PodName: p.Name})
		}
		// Loaded objects always compile: a policy that cannot be enforced
		// as written fails closed, with a warning of the load.
		d, err := policy.Compile(s)
		if err != nil {
			t.Fatalf("loaded objects do not compile: %v", err)
		}
		for name := range d.FailedPolicies {
			if !slices.ContainsFunc(objs.Warnings, func(w string) bool { return strings.Contains(w, "networkpolicy "+name+":") }) {
				t.Fatalf("policy %s fails closed (%s) without a warning of the load: %q", name, d.FailedPolicies[name], objs.Warnings)
			}
		}
	})
}

// FuzzJSONListMatchesWholeDocument: a document read item by item (a JSON
// List) gives what reading it whole gives: the same objects, or an error
// from both.
func FuzzJSONListMatchesWholeDocument(f *testing.F) {
	f.Add([]byte(listJSON))
	f.Add([]byte(`{"apiVersion":"v1","items":[{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a"}},null],"kind":"List"}`))
	f.Add([]byte(`{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Service","metadata":{"name":"s"},"spec":{"clusterIP":"10.96.0.1","ports":[{"port":80,"targetPort":"http"}]}}]}`))
	f.Add([]byte(`{"kind":"List","apiVersion":"v1","items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":{"containers":[{"ports":[{"containerPort":1e1}]}]}}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		if ok, _ := newLoader().jsonList("fuzz.json", splitDocuments(data)[0]); !ok {
			return // both read it the general way (give or take generalPath's comment)
		}
		got, err := Parse("fuzz.json", data)
		want, wantErr := Parse("fuzz.json", []byte(generalPath(string(data))))
		if (err == nil) != (wantErr == nil) {
			t.Fatalf("item by item: %v; whole document: %v", err, wantErr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("item by item:\n%+v\nwhole document:\n%+v", got, want)
		}
	})
}
