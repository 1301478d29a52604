package manifests

import (
	"reflect"
	"strings"
	"testing"

	"lockstep.dev/lockstep/agent/policy"
)

// FuzzLoadDocument parses arbitrary bytes as one manifest file: it must
// never panic, and whatever it accepts must be valid and compile.
func FuzzLoadDocument(f *testing.F) {
	f.Add([]byte(docsExample))
	f.Add([]byte(listJSON))
	f.Add([]byte("---\n---\n"))
	f.Add([]byte("apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {a: b}}\nspec: {containers: [{ports: [{name: http, containerPort: 80}]}]}\nstatus: {podIPs: [{ip: 10.0.0.1}, {ip: 'fd00::1'}]}\n"))
	f.Add([]byte("apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata: {name: p}\nspec:\n  podSelector: {matchExpressions: [{key: a, operator: NotIn, values: [x]}]}\n  egress: [{to: [{ipBlock: {cidr: '::/0', except: ['fd00::/8']}}], ports: [{port: 1, endPort: 65535, protocol: SCTP}]}]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := Parse("fuzz.yaml", data)
		if err != nil {
			return
		}
		s := &policy.Snapshot{Namespaces: objs.NamespaceMap(), Pods: objs.Pods, Policies: objs.Policies, Identities: map[string]policy.Peer{}}
		for _, p := range objs.Pods {
			key := policy.IdentityKey(s.Namespaces[p.Namespace], p)
			if _, ok := s.Identities[key]; !ok {
				s.Identities[key] = policy.FirstPodIdentity + policy.Peer(len(s.Identities))
			}
			s.Local = append(s.Local, policy.LocalEndpoint{HostIfName: p.Namespace + "/" + p.Name, Namespace: p.Namespace, PodName: p.Name})
		}
		// Too many port ranges for one key is the only thing valid objects
		// may still fail on: it is a limit of the dataplane, not the API.
		if _, err := policy.Compile(s); err != nil && !strings.Contains(err.Error(), "port ranges") {
			t.Fatalf("loaded objects do not compile: %v", err)
		}
	})
}

// FuzzJSONListMatchesWholeDocument: a document read item by item (a JSON
// List) gives what reading it whole gives: the same objects, or an error
// from both.
func FuzzJSONListMatchesWholeDocument(f *testing.F) {
	f.Add([]byte(listJSON))
	f.Add([]byte(`{"apiVersion":"v1","items":[{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a"}},null],"kind":"List"}`))
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
