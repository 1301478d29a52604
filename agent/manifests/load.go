package manifests

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/internal/yamljson"
)

// Objects is everything read from a manifest directory.
type Objects struct {
	// Namespaces, sorted by name.
	Namespaces []*policyapi.Namespace
	// Pods, Policies and Services, sorted by namespace and name.
	Pods     []*policyapi.Pod
	Policies []*policyapi.NetworkPolicy
	Services []*policyapi.Service
	// Warnings lists what was read but not used, such as documents of
	// other kinds, one line each, naming the file and document.
	Warnings []string
}

// NamespaceMap returns the namespaces by name, as [policy.Snapshot] wants them.
func (o *Objects) NamespaceMap() map[string]*policyapi.Namespace {
	m := make(map[string]*policyapi.Namespace, len(o.Namespaces))
	for _, ns := range o.Namespaces {
		m[ns.Name] = ns
	}
	return m
}

// Extensions are the file name suffixes Load reads.
var Extensions = []string{".yaml", ".yml", ".json"}

// Load reads every manifest file in dir (see the package documentation).
// Errors name the file and the document (numbered from 1).
func Load(dir string) (*Objects, error) {
	objs, _, err := load(dir)
	return objs, err
}

// Parse reads the manifests of one file's contents; name is used in
// errors and warnings.
func Parse(name string, data []byte) (*Objects, error) {
	l := newLoader()
	if err := l.file(name, data); err != nil {
		return nil, err
	}
	return l.finish(), nil
}

// load reads dir's manifest files one at a time, each parsed and let go
// before the next is read, and fingerprints them as [fingerprint] does.
// The fingerprint covers every file even when one fails to parse, so that
// a bad file left as it is reads as unchanged.
func load(dir string) (*Objects, [32]byte, error) {
	paths, err := listDir(dir)
	fp := newFingerprint(err)
	if err != nil {
		return nil, fp.sum(), err
	}
	l := newLoader()
	var parseErr error
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			err = readErr(err)
			return nil, newFingerprint(err).sum(), err
		}
		fp.add(path, data)
		if parseErr == nil {
			parseErr = l.file(path, data)
		}
	}
	if parseErr != nil {
		return nil, fp.sum(), parseErr
	}
	return l.finish(), fp.sum(), nil
}

// readErr is the error of a manifest file that cannot be read; load and
// fingerprint must word it alike, as it is part of the fingerprint.
func readErr(err error) error { return fmt.Errorf("read manifest: %w", err) }

// listDir returns the paths of dir's manifest files, sorted by name.
func listDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read manifest directory: %w", err)
	}
	var paths []string
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !slices.Contains(Extensions, filepath.Ext(name)) {
			continue
		}
		path := filepath.Join(dir, name)
		// Stat, not e.Type: a mounted ConfigMap's files are symlinks.
		if fi, err := os.Stat(path); err == nil && fi.IsDir() {
			continue
		}
		paths = append(paths, path)
	}
	return paths, nil
}

func newLoader() *loader {
	return &loader{objs: &Objects{}, seen: make(map[string]string)}
}

// file parses the documents of one file.
func (l *loader) file(name string, data []byte) error {
	for i, doc := range splitDocuments(data) {
		if err := l.document(name, i+1, doc); err != nil {
			return err
		}
	}
	return nil
}

// finish sorts what was read and returns it.
func (l *loader) finish() *Objects {
	byName := func(a, b policyapi.ObjectMeta) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	}
	slices.SortFunc(l.objs.Namespaces, func(a, b *policyapi.Namespace) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(l.objs.Pods, func(a, b *policyapi.Pod) int { return byName(a.ObjectMeta, b.ObjectMeta) })
	slices.SortFunc(l.objs.Policies, func(a, b *policyapi.NetworkPolicy) int { return byName(a.ObjectMeta, b.ObjectMeta) })
	slices.SortFunc(l.objs.Services, func(a, b *policyapi.Service) int { return byName(a.ObjectMeta, b.ObjectMeta) })
	return l.objs
}

// splitDocuments splits a YAML stream at "---" lines, the way Kubernetes'
// YAML reader does: a line starting with "---" followed by nothing but
// spaces or a comment. Empty documents are kept so numbering follows the
// file.
func splitDocuments(data []byte) [][]byte {
	var docs [][]byte
	start := 0
	for off := 0; off < len(data); {
		end := bytes.IndexByte(data[off:], '\n')
		if end < 0 {
			end = len(data)
		} else {
			end += off + 1
		}
		line := data[off:end]
		if rest, ok := bytes.CutPrefix(line, []byte("---")); ok {
			rest = bytes.TrimSpace(rest)
			if len(rest) == 0 || rest[0] == '#' {
				docs = append(docs, data[start:off])
				start = end
			}
		}
		off = end
	}
	return append(docs, data[start:])
}

// anyToJSON converts what the YAML decoder made of a document to JSON:
// nothing for an empty document.
func anyToJSON(v any) ([]byte, error) {
	if v == nil {
		return nil, nil
	}
	return json.Marshal(v)
}

// loader accumulates the objects of a load.
type loader struct {
	objs *Objects
	seen map[string]string // kind/namespace/name -> where it was read
}

// document parses one YAML document: an object, a List, or nothing.
func (l *loader) document(name string, idx int, doc []byte) error {
	where := fmt.Sprintf("%s document %d", name, idx)
	if ok, err := l.jsonList(where, doc); ok || err != nil {
		return err
	}
	j, err := yamljson.ToJSON(doc)
	if err != nil {
		return fmt.Errorf("parse %s: %w", where, err)
	}
	j = bytes.TrimSpace(j)
	if len(j) == 0 || string(j) == "null" {
		return nil // empty document, or only comments
	}
	return l.object(where, j, true)
}

// object decodes one JSON object; a List's items are objects too, but
// may not be Lists themselves.
func (l *loader) object(where string, j []byte, listOK bool) error {
	if j[0] != '{' {
		return fmt.Errorf("parse %s: not an object", where)
	}
	var tm policyapi.TypeMeta
	if err := json.Unmarshal(j, &tm); err != nil {
		return fmt.Errorf("parse %s: %w", where, err)
	}
	want := map[string]string{
		"Namespace":     "v1",
		"Pod":           "v1",
		"NetworkPolicy": "networking.k8s.io/v1",
		"Service":       "v1",
		"List":          "v1",
	}[tm.Kind]
	switch {
	case tm.Kind == "":
		return fmt.Errorf("parse %s: no kind", where)
	case want == "":
		l.objs.Warnings = append(l.objs.Warnings, fmt.Sprintf("%s: skipped %s %s: lockstep does not use this kind", where, tm.APIVersion, tm.Kind))
		return nil
	case tm.APIVersion != want:
		return fmt.Errorf("parse %s: %s has apiVersion %q, want %q", where, tm.Kind, tm.APIVersion, want)
	}
	switch tm.Kind {
	case "List":
		if !listOK {
			return fmt.Errorf("parse %s: a List inside a List", where)
		}
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		if err := json.Unmarshal(j, &list); err != nil {
			return fmt.Errorf("parse %s: %w", where, err)
		}
		for i, item := range list.Items {
			if err := l.listItem(where, i+1, item); err != nil {
				return err
			}
		}
		return nil
	case "Namespace":
		var ns policyapi.Namespace
		if err := decode(where, j, &ns); err != nil {
			return err
		}
		ns.Namespace = "" // cluster-scoped
		ns.Default()
		if err := l.add(where, &ns.TypeMeta, &ns.ObjectMeta, ns.Validate); err != nil {
			return err
		}
		l.objs.Namespaces = append(l.objs.Namespaces, &ns)
	case "Pod":
		var pod policyapi.Pod
		if err := decode(where, j, &pod); err != nil {
			return err
		}
		pod.Default()
		if err := l.add(where, &pod.TypeMeta, &pod.ObjectMeta, pod.Validate); err != nil {
			return err
		}
		l.objs.Pods = append(l.objs.Pods, &pod)
	case "NetworkPolicy":
		var np policyapi.NetworkPolicy
		if err := decode(where, j, &np); err != nil {
			return err
		}
		np.Default()
		// A policy that does not compile is loaded all the same, with a
		// warning: the compiler fails it closed for the pods it selects,
		// as it does a policy from the API server, and the rest of the
		// directory stays in force. Only a nameless one cannot be keyed.
		var invalid error
		validate := func() error {
			if np.Name == "" {
				return np.Validate()
			}
			invalid = np.Validate()
			return nil
		}
		if err := l.add(where, &np.TypeMeta, &np.ObjectMeta, validate); err != nil {
			return err
		}
		if invalid != nil {
			l.objs.Warnings = append(l.objs.Warnings, fmt.Sprintf("%s: %v (the pods it selects fail closed)", where, invalid))
		}
		l.objs.Policies = append(l.objs.Policies, &np)
	case "Service":
		var svc policyapi.Service
		if err := decode(where, j, &svc); err != nil {
			return err
		}
		svc.Default()
		validate := func() error {
			if svc.NeedsClusterIP() {
				return fmt.Errorf("service %s/%s: %w", svc.Namespace, svc.Name, ErrNoClusterIP)
			}
			return svc.Validate()
		}
		if err := l.add(where, &svc.TypeMeta, &svc.ObjectMeta, validate); err != nil {
			return err
		}
		l.objs.Services = append(l.objs.Services, &svc)
	}
	return nil
}

// ErrNoClusterIP: a manifest's Service of a type pods reach by ClusterIP
// names none. The API server allocates ClusterIPs from its service range;
// without one lockstep has no range to allocate from, so a manifest gives
// the address.
var ErrNoClusterIP = errors.New(`spec.clusterIP is required in a manifest: lockstep allocates no ClusterIPs without an API server; give the Service an address of your service range (and spec.clusterIPs for a second family), or "None" for a headless Service`)

func decode(where string, j []byte, v any) error {
	if err := json.Unmarshal(j, v); err != nil {
		return fmt.Errorf("parse %s: %w", where, err)
	}
	return nil
}

// add defaults the namespace and UID, validates the object and checks it
// was not read before.
func (l *loader) add(where string, tm *policyapi.TypeMeta, meta *policyapi.ObjectMeta, validate func() error) error {
	if tm.Kind != "Namespace" && meta.Namespace == "" {
		meta.Namespace = "default"
	}
	if err := validate(); err != nil {
		return fmt.Errorf("%s: %w", where, err)
	}
	key := tm.Kind + " " + meta.Namespace + "/" + meta.Name
	if tm.Kind == "Namespace" {
		key = tm.Kind + " " + meta.Name
	}
	if first, dup := l.seen[key]; dup {
		return fmt.Errorf("%s: duplicate %s (first in %s)", where, key, first)
	}
	l.seen[key] = where
	if meta.UID == "" {
		meta.UID = derivedUID(key)
	}
	return nil
}

// derivedUID returns a UUID-shaped UID (version 8, "custom") made from the
// SHA-256 of the object's kind, namespace and name.
func derivedUID(key string) string {
	sum := sha256.Sum256([]byte("lockstep manifest " + key))
	sum[6] = sum[6]&0x0f | 0x80
	sum[8] = sum[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
}
