package yamljson

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	k8syaml "sigs.k8s.io/yaml"
)

// The Kubernetes tools' YAML library (sigs.k8s.io/yaml, YAML 1.1) is what
// kubectl reads and writes; these tests hold this package to it where
// lockstep's output or input meets kubectl's.

// TestMarshalReadsBackInYAML11: every string -o yaml writes reads back as
// that string in a YAML 1.1 reader too, and in this package.
func TestMarshalReadsBackInYAML11(t *testing.T) {
	tricky := []string{"y", "Y", "yes", "No", "on", "OFF", "true", "False", "null", "~", "", "1", "0755", "0x1f", "1e3", "1.5",
		"1_000", "1:20", "-1:20:30.5", "12:70", "1:2.30-1", "--1:20", "_1", "in_f", "12:30", "8080:50", "10.0.0.1", "fd00::1", "a: b", "- x", "#c", "1.30", ".inf", "2026-11-28", "x y"}
	m := map[string]string{}
	for i, s := range tricky {
		m[strings.Repeat("k", i+1)] = s
		m[s+"-key"] = s
	}
	out, err := Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var back11 map[string]string
	if err := k8syaml.Unmarshal(out, &back11); err != nil {
		t.Fatalf("read -o yaml with a YAML 1.1 reader: %v\n%s", err, out)
	}
	if !reflect.DeepEqual(back11, m) {
		for k, v := range m {
			if back11[k] != v {
				t.Errorf("YAML 1.1 reads %q as %q, want %q", k, back11[k], v)
			}
		}
	}
	var back12 map[string]string
	if err := Unmarshal(out, &back12); err != nil || !reflect.DeepEqual(back12, m) {
		t.Errorf("Unmarshal(Marshal(m)) = %v, %v; want m", back12, err)
	}
	if addr := strings.Repeat("k", 1+slices.Index(tricky, "10.0.0.1")) + ": 10.0.0.1\n"; !strings.Contains(string(out), "\n"+addr) && !strings.HasPrefix(string(out), addr) {
		t.Errorf("an address is quoted or missing:\n%s", out)
	}
}

// TestMarshalQuotesOnlyWhatNeedsIt: values no YAML reader misreads stay
// plain.
func TestMarshalQuotesOnlyWhatNeedsIt(t *testing.T) {
	for _, s := range []string{"10.0.0.1", "1:2.30-1", "--1:20", "_1", "in_f", "v1.30", "12:70"} {
		out, err := Marshal(map[string]string{"k": s})
		if err != nil || string(out) != "k: "+s+"\n" {
			t.Errorf("Marshal(%q) = %q, %v; want it plain", s, out, err)
		}
	}
	for _, s := range []string{"yes", "off", "1:20", "-1:20:30.5", "1_000"} {
		if out, err := Marshal(map[string]string{"k": s}); err != nil || !strings.Contains(string(out), `"`+s+`"`) {
			t.Errorf("Marshal(%q) = %q, %v; want it quoted", s, out, err)
		}
	}
}

// TestMarshalIndent: nested values are indented by two spaces, as
// kubectl's -o yaml.
func TestMarshalIndent(t *testing.T) {
	out, err := Marshal(map[string]any{"a": map[string]any{"b": []string{"c"}}})
	if err != nil {
		t.Fatal(err)
	}
	if want := "a:\n  b:\n  - c\n"; string(out) != want {
		t.Errorf("Marshal = %q, want %q", out, want)
	}
}

// TestUnmarshalTypedAsKubectl: a kubeconfig-like document reads into the
// same values as Kubernetes' YAML library reads it (kube/client's
// TestLoadConfigReadsKubeconfigsAsClientcmd holds the kubeconfig itself to
// kubectl's loader).
func TestUnmarshalTypedAsKubectl(t *testing.T) {
	type env struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	}
	type inner struct {
		Skip bool  `json:"insecure-skip-tls-verify,omitempty"`
		Env  []env `json:"env"`
	}
	type embedded struct {
		Namespace string `json:"namespace"`
	}
	type doc struct {
		embedded
		Name  string              `json:"name"`
		Data  []byte              `json:"data"`
		Inner *inner              `json:"inner"`
		Extra map[string][]string `json:"extra"`
		Count int                 `json:"count"`
		Args  []string            `json:"args"`
		Any   any                 `json:"any"`
	}
	// Where kubectl's library reads a scalar as a YAML 1.1 boolean or a
	// float before it makes it the string a field wants ("1.30" becomes
	// "1.3", "N" and "on" "false" and "true"), this package keeps what the
	// author wrote.
	var literal doc
	if err := UnmarshalTyped([]byte("name: 1.30\nargs: [on, N]\n"), &literal); err != nil || literal.Name != "1.30" || !slices.Equal(literal.Args, []string{"on", "N"}) {
		t.Errorf("read name: 1.30, args: [on, N] = %+v, %v; want the text as written", literal, err)
	}
	for _, tc := range []struct{ name, in string }{
		{"numbers and booleans in string fields", "name: a1.30\ninner:\n  env:\n  - name: DEBUG\n    value: true\n  - name: M\n    value: 1\nargs: [true, 2, null]\n"},
		{"YAML 1.1 booleans in a bool field", "inner:\n  insecure-skip-tls-verify: yes\n"},
		{"off", "inner:\n  insecure-skip-tls-verify: off\n"},
		{"a repeated key takes the last value", "name: a\nname: b\n"},
		{"base64 data", "data: aGVsbG8=\n"},
		{"a map of lists", "extra:\n  scopes: [a, b]\n"},
		{"a number", "count: 3\n"},
		{"an untyped value", "any:\n  x: [1, z, true]\n"},
		{"a field of an embedded struct", "namespace: ns\n"},
		{"case-insensitive field", "NAME: x\n"},
		{"anchors and aliases", "name: &n shared\nnamespace: *n\n"},
		{"empty", ""},
		{"merge keys, explicit keys winning", "base: &b {name: from-base, count: 1}\nother: &o {count: 2, args: [x]}\ninner: {}\nany: {<<: [*b, *o], name: own}\n"},
		{"a merge key in a typed mapping", "base: &b {namespace: ns, name: n}\nextra: {k: [v]}\n<<: *b\nname: mine\n"},
		{"a repeated key whose value is a mapping takes the last whole", "inner: {insecure-skip-tls-verify: true}\ninner: {env: []}\n"},
		{"an alias as a key", "name: &k count\n*k : 4\n"},
		{"a quoted yes is not a boolean", "inner:\n  insecure-skip-tls-verify: \"yes\"\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want, got doc
			errWant := k8syaml.Unmarshal([]byte(tc.in), &want)
			errGot := UnmarshalTyped([]byte(tc.in), &got)
			if (errWant != nil) != (errGot != nil) {
				t.Fatalf("error %v, kubectl's %v", errGot, errWant)
			}
			if !reflect.DeepEqual(got, want) {
				g, _ := json.Marshal(got)
				w, _ := json.Marshal(want)
				t.Errorf("read\n%s\nkubectl's\n%s", g, w)
			}
		})
	}
}

// TestUnmarshalTypedBoundsAliases: aliases of aliases cannot make a small
// document expand without end.
func TestUnmarshalTypedBoundsAliases(t *testing.T) {
	doc := "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
	prev := "a"
	for i := range 8 {
		name := fmt.Sprintf("l%d", i)
		doc += fmt.Sprintf("%s: &%s [*%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s, *%s]\n", name, name, prev, prev, prev, prev, prev, prev, prev, prev, prev, prev)
		prev = name
	}
	var v map[string]any
	err := UnmarshalTyped([]byte(doc), &v)
	if err == nil || !strings.Contains(err.Error(), "aliases expanded") {
		t.Errorf("UnmarshalTyped of %d bytes expanding to 10^9 values: %v, want the bound", len(doc), err)
	}
}

// TestUnmarshalTypedRefusesSelfReference: an anchor that contains itself is
// refused at once, not after a million values.
func TestUnmarshalTypedRefusesSelfReference(t *testing.T) {
	for _, doc := range []string{"a: &a [*a]\n", "a: &a {b: *a}\n", "a: &a {<<: *a}\n"} {
		var v map[string]any
		if err := UnmarshalTyped([]byte(doc), &v); err == nil || !strings.Contains(err.Error(), "contains itself") {
			t.Errorf("UnmarshalTyped(%q) = %v, want an anchor that contains itself refused", doc, err)
		}
	}
}

// TestUnmarshalTypedBoundsBytes: one long scalar aliased many times cannot
// expand past the byte bound.
func TestUnmarshalTypedBoundsBytes(t *testing.T) {
	doc := "s: &s " + strings.Repeat("x", 1<<20) + "\nl: [" + strings.Repeat("*s, ", 100) + "*s]\n"
	var v map[string]any
	if err := UnmarshalTyped([]byte(doc), &v); err == nil || !strings.Contains(err.Error(), "bytes with aliases expanded") {
		t.Errorf("UnmarshalTyped of a 1 MiB scalar aliased 101 times: %v, want the byte bound", err)
	}
}

// TestUnmarshalTypedFieldsAsEncodingJSON: a key names the field
// encoding/json would fill, so the scalar is read as that field's type.
func TestUnmarshalTypedFieldsAsEncodingJSON(t *testing.T) {
	type Label string
	type inner struct {
		Name string `json:"name"`
	}
	type outer struct {
		inner
		Label
		Name int `json:"name"`
	}
	var v outer
	if err := UnmarshalTyped([]byte("name: 5\nLabel: 7\n"), &v); err != nil || v.Name != 5 || v.Label != "7" {
		t.Errorf("UnmarshalTyped = %+v, %v; want the outer name 5 and the embedded Label \"7\"", v, err)
	}
}
