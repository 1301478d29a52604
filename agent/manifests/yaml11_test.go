package manifests

import "testing"

// TestYAML11ScalarsStayStrings: `ns: y` is the string "y" in a label, as
// kubectl reads it, not the YAML 1.1 boolean true.
func TestYAML11ScalarsStayStrings(t *testing.T) {
	objs, err := Parse("ns.yaml", []byte("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: y\n  labels:\n    ns: y\n    tier: on\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(objs.Namespaces) != 1 {
		t.Fatalf("got %d namespaces", len(objs.Namespaces))
	}
	ns := objs.Namespaces[0]
	if ns.Name != "y" || ns.Labels["ns"] != "y" || ns.Labels["tier"] != "on" {
		t.Fatalf("namespace %q labels %v, want name y and labels ns=y tier=on", ns.Name, ns.Labels)
	}
}
