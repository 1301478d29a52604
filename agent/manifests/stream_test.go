package manifests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

// generalPath makes a document that is not read item by item: a comment
// before the '{' sends it to the whole-document path, the reference the
// item-by-item path must match.
func generalPath(doc string) string { return "# the whole document at once\n" + doc }

// TestJSONListReadsAsWholeDocument: a JSON List read item by item gives
// what the whole document read at once gives, whatever the order of its
// keys, and fails where it fails.
func TestJSONListReadsAsWholeDocument(t *testing.T) {
	pod := `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p[1]","labels":{"a":"}\"],{"}},` +
		`"spec":{"containers":[{"ports":[{"name":"h","containerPort":8.0e1}]}]},"status":{"podIP":"10.0.0.1"}}`
	ns := `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"team","labels":{"on":"y"}}}`
	for _, tc := range []struct {
		name, doc string
		wantErr   string // "" if both paths must succeed
	}{
		{"kind first", `{"apiVersion":"v1","kind":"List","items":[` + pod + `,` + ns + `]}`, ""},
		{"items first, as kubectl writes it", "{\n  \"apiVersion\": \"v1\",\n  \"items\": [\n    " + ns + ",\n    " + pod + "\n  ],\n  \"kind\": \"List\",\n  \"metadata\": {\"resourceVersion\": \"\"}\n}\n", ""},
		{"no items", `{"apiVersion":"v1","kind":"List","items":[]}`, ""},
		{"null items", `{"apiVersion":"v1","kind":"List","items":null}`, ""},
		{"other kinds warned", `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"s"}}]}`, ""},
		{"a single object", pod, ""},
		{"repeated key in an item", `{"apiVersion":"v1","kind":"List","items":[` + ns + `,{"apiVersion":"v1","kind":"Pod","kind":"Pod","metadata":{"name":"x"}}]}`, "document 1 item 2: yaml: unmarshal errors:\n  line 1: mapping key \"kind\" already defined at line 1"},
		{"repeated items", `{"apiVersion":"v1","kind":"List","items":[],"items":[]}`, "already defined"},
		{"null item", `{"apiVersion":"v1","kind":"List","items":[` + ns + `,null]}`, "document 1 item 2: empty item"},
		{"list in a list", `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"List","items":[]}]}`, "a List inside a List"},
		{"invalid item", `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Pod","metadata":{}}]}`, "document 1 item 1: pod in namespace \"default\": metadata.name is required"},
		{"not an int32", `{"apiVersion":"v1","kind":"List","items":[{"apiVersion":"v1","kind":"Pod","metadata":{"name":"x"},"spec":{"containers":[{"ports":[{"containerPort":1.5}]}]}}]}`, "document 1 item 1"},
		{"wrong apiVersion", `{"apiVersion":"v2","kind":"List","items":[` + ns + `]}`, `want "v1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want, wantErr := Parse("a.json", []byte(generalPath(tc.doc)))
			got, err := Parse("a.json", []byte(tc.doc))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("error %v, want one containing %q", err, tc.wantErr)
				}
				if wantErr == nil {
					t.Errorf("the whole-document path accepts what the item-by-item path refuses (%v)", err)
				}
				return
			}
			if err != nil || wantErr != nil {
				t.Fatalf("errors %v and (whole document) %v, want none", err, wantErr)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("item by item:\n%+v\nwhole document:\n%+v", got, want)
			}
		})
	}
}

func TestJSONElements(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{`[]`, nil},
		{` [ 1 , -2.5e3,true,null ] `[1:], []string{"1", "-2.5e3", "true", "null"}},
		{`["a\"]", "\\", "}{"]`, []string{`"a\"]"`, `"\\"`, `"}{"`}},
		{`[{"a":[1,{"b":"]"}]},[[]],{}]`, []string{`{"a":[1,{"b":"]"}]}`, `[[]]`, `{}`}},
	} {
		var got []string
		for _, e := range jsonElements([]byte(tc.in)) {
			got = append(got, string(e))
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("jsonElements(%s) = %q, want %q", tc.in, got, tc.want)
		}
	}
	fields := jsonFields([]byte(`{ "a" : 1, "b\u0022":{"c":"}"} ,"a":[ ] }`))
	want := []jsonField{{"a", []byte("1")}, {`b"`, []byte(`{"c":"}"}`)}, {"a", []byte("[ ]")}}
	if !reflect.DeepEqual(fields, want) {
		t.Errorf("jsonFields = %q, want %q", fields, want)
	}
}

// largeList writes a JSON List of n pods, each with labels, ports and
// addresses, and one policy per 10 pods: a cluster as a tool writes it.
func largeList(t testing.TB, dir string, n int) int64 {
	t.Helper()
	var b strings.Builder
	b.WriteString(`{"apiVersion":"v1","kind":"List","items":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		ip := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		fmt.Fprintf(&b, `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"app%d-5f%02x-%d","namespace":"ns%d",`+
			`"labels":{"app":"app%d","tier":"%d","pod-template-hash":"5f%02x"}},"spec":{"nodeName":"remote",`+
			`"containers":[{"name":"main","ports":[{"name":"http","containerPort":8000},{"name":"dns","containerPort":53,"protocol":"UDP"}]}]},`+
			`"status":{"phase":"Running","podIP":%q,"podIPs":[{"ip":%q}]}}`, i%20, i%20, i, i%50, i%20, i%3, i%20, ip, ip)
		if i%10 == 0 {
			fmt.Fprintf(&b, `,{"apiVersion":"networking.k8s.io/v1","kind":"NetworkPolicy","metadata":{"name":"allow-%d","namespace":"ns%d"},`+
				`"spec":{"podSelector":{"matchLabels":{"app":"app%d"}},"ingress":[{"ports":[{"port":"http"},{"port":9000,"endPort":9100}],`+
				`"from":[{"podSelector":{"matchLabels":{"app":"app%d"}}}]}],"policyTypes":["Ingress"]}}`, i, i%50, i%20, (i+1)%20)
		}
	}
	b.WriteString(`]}`)
	if err := os.WriteFile(filepath.Join(dir, "cluster.json"), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return int64(b.Len())
}

// peakHeapEnv makes the test binary a child that loads the directory it
// names and prints how much heap the load needed.
const peakHeapEnv = "LOCKSTEP_TEST_MANIFESTS_PEAK_HEAP"

// TestLoadLargeListPeakHeap: loading a cluster-sized JSON List needs heap
// in proportion to the file, a small multiple of it, not the tens of
// times a tree of the whole document costs. The load runs in a fresh
// process (the heap a process has mapped never shrinks, so only a fresh
// one shows the load's peak) with the collector at GOGC=10, so that the
// heap mapped follows what is live.
func TestLoadLargeListPeakHeap(t *testing.T) {
	if dir := os.Getenv(peakHeapEnv); dir != "" {
		debug.SetGCPercent(10)
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		objs, err := Load(dir)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(1)
		}
		runtime.ReadMemStats(&after)
		fmt.Printf("peak heap %d pods %d\n", after.HeapSys-before.HeapSys, len(objs.Pods))
		os.Exit(0)
	}
	if testing.Short() {
		t.Skip("loads 5k pods in a child process")
	}
	const pods = 5000
	dir := t.TempDir()
	size := largeList(t, dir, pods)
	cmd := exec.Command(os.Args[0], "-test.run=^TestLoadLargeListPeakHeap$")
	cmd.Env = append(os.Environ(), peakHeapEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	f := strings.Fields(string(out))
	if len(f) < 5 || f[0] != "peak" || f[4] != strconv.Itoa(pods) {
		t.Fatalf("child said %q", out)
	}
	peak, err := strconv.ParseInt(f[2], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	// Measured: about 4 times the file (the file, the objects, and the
	// collector's slack); a tree of the whole document costs about 40.
	t.Logf("%d-byte file, peak heap %d bytes (%.1f×)", size, peak, float64(peak)/float64(size))
	if limit := 10 * size; peak > limit {
		t.Errorf("loading a %d-byte List took %d bytes of heap, over %d: is a document held whole again, or read twice?", size, peak, limit)
	}
}

// BenchmarkLoadLargeList reports the cost of loading 10k pods and 1k
// policies from one JSON List.
func BenchmarkLoadLargeList(b *testing.B) {
	dir := b.TempDir()
	b.SetBytes(largeList(b, dir, 10000))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Load(dir); err != nil {
			b.Fatal(err)
		}
	}
}
