package ociimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// testImage is a small image with one of each kind of entry, the binary
// read from a host file as tools/image does.
func testImage(t *testing.T) Image {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "lockstep")
	if err := os.WriteFile(bin, []byte("#!binary\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return Image{
		Name: "lockstep:dev",
		Config: Config{
			Entrypoint:   []string{"/usr/local/bin/lockstep"},
			Cmd:          []string{"version"},
			Env:          []string{"PATH=/usr/local/bin:/usr/sbin"},
			WorkingDir:   "/",
			User:         "0:0",
			Labels:       map[string]string{"org.opencontainers.image.title": "lockstep"},
			Architecture: "arm64",
			Variant:      "v8",
		},
		Entries: []Entry{
			File("/usr/local/bin/lockstep", bin, 0o755),
			Symlink("/usr/local/bin/lockstep-cni", "lockstep"),
			Bytes("/etc/nsswitch.conf", []byte("hosts: files\n"), 0o644),
			Dir("/tmp", fs.ModeSticky|0o777),
			Dir("/run", 0o755),
			Symlink("/lib64", "usr/lib64"),
		},
		CreatedBy: "lockstep tools/image",
	}
}

// archive is a written image read back member by member.
type archive struct {
	files map[string][]byte
	order []string
}

func readArchive(t *testing.T, data []byte) archive {
	t.Helper()
	a := archive{files: map[string][]byte{}}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return a
		}
		if err != nil {
			t.Fatalf("read archive: %v", err)
		}
		a.order = append(a.order, hdr.Name)
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("read %s: %v", hdr.Name, err)
		}
		a.files[hdr.Name] = b
	}
}

// blob returns the blob a descriptor points at and checks that its digest
// and size are the blob's.
func (a archive) blob(t *testing.T, desc map[string]any, wantMediaType string) []byte {
	t.Helper()
	if desc["mediaType"] != wantMediaType {
		t.Errorf("mediaType = %v, want %s", desc["mediaType"], wantMediaType)
	}
	digest, _ := desc["digest"].(string)
	hexSum, ok := strings.CutPrefix(digest, "sha256:")
	if !ok {
		t.Fatalf("digest %q is not sha256", digest)
	}
	b, ok := a.files["blobs/sha256/"+hexSum]
	if !ok {
		t.Fatalf("no blob for %s", digest)
	}
	if got := sha256Hex(b); got != hexSum {
		t.Errorf("blob %s hashes to %s", hexSum, got)
	}
	if size, _ := desc["size"].(float64); int(size) != len(b) {
		t.Errorf("descriptor of %s says size %v, blob has %d bytes", digest, desc["size"], len(b))
	}
	return b
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

func decode(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}

func write(t *testing.T, img Image) ([]byte, Written) {
	t.Helper()
	var buf bytes.Buffer
	w, err := Write(&buf, img)
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), w
}

// TestWriteLayout follows the OCI layout from index.json to the layer, as
// containerd does, and manifest.json to the same blobs, as docker load
// does.
func TestWriteLayout(t *testing.T) {
	data, w := write(t, testImage(t))
	a := readArchive(t, data)

	wantOrder := []string{"blobs/", "blobs/sha256/"}
	var blobNames []string
	for name := range a.files {
		if _, ok := strings.CutPrefix(name, "blobs/sha256/"); ok {
			blobNames = append(blobNames, name)
		}
	}
	slices.Sort(blobNames)
	wantOrder = append(append(wantOrder, blobNames...), "index.json", "manifest.json", "oci-layout")
	if !slices.Equal(a.order, wantOrder) {
		t.Errorf("archive members %q, want %q", a.order, wantOrder)
	}
	if len(blobNames) != 3 {
		t.Errorf("%d blobs, want manifest, config and layer", len(blobNames))
	}

	var layout map[string]any
	decode(t, a.files["oci-layout"], &layout)
	if layout["imageLayoutVersion"] != "1.0.0" {
		t.Errorf("oci-layout = %s", a.files["oci-layout"])
	}

	var idx struct {
		SchemaVersion int              `json:"schemaVersion"`
		MediaType     string           `json:"mediaType"`
		Manifests     []map[string]any `json:"manifests"`
	}
	decode(t, a.files["index.json"], &idx)
	if idx.SchemaVersion != 2 || idx.MediaType != "application/vnd.oci.image.index.v1+json" || len(idx.Manifests) != 1 {
		t.Fatalf("index.json = %s", a.files["index.json"])
	}
	entry := idx.Manifests[0]
	wantAnnotations := map[string]any{
		"io.containerd.image.name":          "docker.io/library/lockstep:dev",
		"org.opencontainers.image.ref.name": "dev",
	}
	if !reflect.DeepEqual(entry["annotations"], wantAnnotations) {
		t.Errorf("index annotations = %v, want %v", entry["annotations"], wantAnnotations)
	}
	wantPlatform := map[string]any{"architecture": "arm64", "os": "linux", "variant": "v8"}
	if !reflect.DeepEqual(entry["platform"], wantPlatform) {
		t.Errorf("index platform = %v, want %v", entry["platform"], wantPlatform)
	}
	if entry["digest"] != w.ManifestDigest {
		t.Errorf("index points at %v, Write returned manifest %s", entry["digest"], w.ManifestDigest)
	}

	var m struct {
		SchemaVersion int              `json:"schemaVersion"`
		MediaType     string           `json:"mediaType"`
		Config        map[string]any   `json:"config"`
		Layers        []map[string]any `json:"layers"`
	}
	decode(t, a.blob(t, entry, "application/vnd.oci.image.manifest.v1+json"), &m)
	if m.SchemaVersion != 2 || m.MediaType != "application/vnd.oci.image.manifest.v1+json" || len(m.Layers) != 1 {
		t.Fatalf("manifest = %+v", m)
	}
	cfgBlob := a.blob(t, m.Config, "application/vnd.oci.image.config.v1+json")
	layerBlob := a.blob(t, m.Layers[0], "application/vnd.oci.image.layer.v1.tar")
	if _, err := tar.NewReader(bytes.NewReader(layerBlob)).Next(); err != nil {
		t.Errorf("the layer is not an uncompressed tar: %v", err)
	}
	if m.Config["digest"] != w.ConfigDigest || m.Layers[0]["digest"] != w.LayerDigest || int64(len(layerBlob)) != w.LayerSize {
		t.Errorf("Write returned %+v, manifest says config %v layer %v", w, m.Config["digest"], m.Layers[0]["digest"])
	}

	var cfg struct {
		Created      string `json:"created"`
		Architecture string `json:"architecture"`
		Variant      string `json:"variant"`
		OS           string `json:"os"`
		Config       struct {
			User       string
			Env        []string
			Entrypoint []string
			Cmd        []string
			WorkingDir string
			Labels     map[string]string
		} `json:"config"`
		RootFS struct {
			Type    string   `json:"type"`
			DiffIDs []string `json:"diff_ids"`
		} `json:"rootfs"`
		History []map[string]string `json:"history"`
	}
	decode(t, cfgBlob, &cfg)
	if cfg.Created != "1970-01-01T00:00:00Z" || cfg.Architecture != "arm64" || cfg.Variant != "v8" || cfg.OS != "linux" {
		t.Errorf("config created %q platform %s/%s/%s", cfg.Created, cfg.OS, cfg.Architecture, cfg.Variant)
	}
	// An uncompressed layer's diff ID is its digest.
	if cfg.RootFS.Type != "layers" || !slices.Equal(cfg.RootFS.DiffIDs, []string{"sha256:" + sha256Hex(layerBlob)}) {
		t.Errorf("rootfs = %+v", cfg.RootFS)
	}
	c := cfg.Config
	if !slices.Equal(c.Entrypoint, []string{"/usr/local/bin/lockstep"}) || !slices.Equal(c.Cmd, []string{"version"}) ||
		!slices.Equal(c.Env, []string{"PATH=/usr/local/bin:/usr/sbin"}) || c.WorkingDir != "/" || c.User != "0:0" ||
		c.Labels["org.opencontainers.image.title"] != "lockstep" {
		t.Errorf("container config = %+v", c)
	}
	if len(cfg.History) != 1 || cfg.History[0]["created_by"] != "lockstep tools/image" {
		t.Errorf("history = %v", cfg.History)
	}

	var docker []struct {
		Config   string
		RepoTags []string
		Layers   []string
	}
	decode(t, a.files["manifest.json"], &docker)
	if len(docker) != 1 {
		t.Fatalf("manifest.json = %s", a.files["manifest.json"])
	}
	d := docker[0]
	if d.Config != "blobs/sha256/"+sha256Hex(cfgBlob) || !slices.Equal(d.Layers, []string{"blobs/sha256/" + sha256Hex(layerBlob)}) {
		t.Errorf("manifest.json points at config %s layers %v, the OCI manifest at %v and %v", d.Config, d.Layers, m.Config["digest"], m.Layers[0]["digest"])
	}
	if !slices.Equal(d.RepoTags, []string{"lockstep:dev"}) {
		t.Errorf("RepoTags = %q, want the familiar name", d.RepoTags)
	}
	if w.Reference.String() != "docker.io/library/lockstep:dev" {
		t.Errorf("Written.Reference = %s", w.Reference)
	}
}

// layerHeaders returns the headers and contents of the image's layer.
func layerHeaders(t *testing.T, data []byte) ([]*tar.Header, map[string]string) {
	t.Helper()
	a := readArchive(t, data)
	var docker []struct{ Layers []string }
	decode(t, a.files["manifest.json"], &docker)
	tr := tar.NewReader(bytes.NewReader(a.files[docker[0].Layers[0]]))
	var hdrs []*tar.Header
	contents := map[string]string{}
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return hdrs, contents
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		hdrs = append(hdrs, hdr)
		contents[hdr.Name] = string(b)
	}
}

func TestWriteLayerEntries(t *testing.T) {
	data, w := write(t, testImage(t))
	hdrs, contents := layerHeaders(t, data)

	type entry struct {
		name     string
		typeflag byte
		mode     int64
		linkname string
	}
	want := []entry{
		{"etc/", tar.TypeDir, 0o755, ""},
		{"etc/nsswitch.conf", tar.TypeReg, 0o644, ""},
		{"lib64", tar.TypeSymlink, 0o777, "usr/lib64"},
		{"run/", tar.TypeDir, 0o755, ""},
		{"tmp/", tar.TypeDir, 0o1777, ""},
		{"usr/", tar.TypeDir, 0o755, ""},
		{"usr/local/", tar.TypeDir, 0o755, ""},
		{"usr/local/bin/", tar.TypeDir, 0o755, ""},
		{"usr/local/bin/lockstep", tar.TypeReg, 0o755, ""},
		{"usr/local/bin/lockstep-cni", tar.TypeSymlink, 0o777, "lockstep"},
	}
	var got []entry
	for _, h := range hdrs {
		got = append(got, entry{h.Name, h.Typeflag, h.Mode, h.Linkname})
		if h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" {
			t.Errorf("%s owned by %d(%q):%d(%q), want 0:0 without names", h.Name, h.Uid, h.Uname, h.Gid, h.Gname)
		}
		if !h.ModTime.Equal(time.Unix(0, 0)) {
			t.Errorf("%s mtime %v, want the epoch", h.Name, h.ModTime)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("layer entries:\n got %v\nwant %v", got, want)
	}
	if contents["usr/local/bin/lockstep"] != "#!binary\n" || contents["etc/nsswitch.conf"] != "hosts: files\n" {
		t.Errorf("file contents %q", contents)
	}
	if w.Entries != len(want) {
		t.Errorf("Written.Entries = %d, want %d", w.Entries, len(want))
	}
}

// TestWriteDeterministic: the digests depend on the inputs alone, not on
// their order or on when the image is written.
func TestWriteDeterministic(t *testing.T) {
	img := testImage(t)
	first, w1 := write(t, img)

	shuffled := img
	shuffled.Entries = slices.Clone(img.Entries)
	slices.Reverse(shuffled.Entries)
	second, w2 := write(t, shuffled)
	if !bytes.Equal(first, second) || w1 != w2 {
		t.Fatalf("two writes of the same image differ: %s and %s", w1.ManifestDigest, w2.ManifestDigest)
	}

	changed := img
	changed.Entries = append(slices.Clone(img.Entries), Bytes("/etc/hostname", []byte("x\n"), 0o644))
	if _, w3 := write(t, changed); w3.ManifestDigest == w1.ManifestDigest || w3.LayerDigest == w1.LayerDigest {
		t.Errorf("adding a file kept the digests %s", w3.ManifestDigest)
	}

	dated := img
	dated.Created = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	if _, w4 := write(t, dated); w4.ConfigDigest == w1.ConfigDigest || w4.LayerDigest == w1.LayerDigest {
		t.Errorf("another creation time kept the digests %s", w4.ManifestDigest)
	}
}

func TestWriteRejects(t *testing.T) {
	tests := []struct {
		name    string
		image   string
		entries []Entry
		want    error
	}{
		{"relative path", "x:y", []Entry{Bytes("etc/x", nil, 0o644)}, ErrInvalidEntry},
		{"root", "x:y", []Entry{Dir("/", 0o755)}, ErrInvalidEntry},
		{"duplicate", "x:y", []Entry{Bytes("/a", nil, 0o644), Bytes("/./a", nil, 0o600)}, ErrInvalidEntry},
		{"below a file", "x:y", []Entry{Bytes("/a", nil, 0o644), Bytes("/a/b", nil, 0o644)}, ErrInvalidEntry},
		{"below a symlink", "x:y", []Entry{Symlink("/lib", "usr/lib"), Bytes("/lib/libc.so.6", nil, 0o644)}, ErrInvalidEntry},
		{"symlink without target", "x:y", []Entry{Symlink("/a", "")}, ErrInvalidEntry},
		{"device", "x:y", []Entry{{Path: "/dev/null", Mode: fs.ModeDevice | 0o666}}, ErrInvalidEntry},
		{"source is a directory", "x:y", []Entry{File("/a", os.TempDir(), 0o644)}, ErrInvalidEntry},
		{"bad name", "Lockstep:dev", nil, ErrInvalidReference},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Write(io.Discard, Image{Name: tt.image, Entries: tt.entries})
			if !errors.Is(err, tt.want) {
				t.Fatalf("Write = %v, want %v", err, tt.want)
			}
		})
	}

	t.Run("missing source", func(t *testing.T) {
		_, err := Write(io.Discard, Image{Name: "x:y", Entries: []Entry{File("/a", filepath.Join(t.TempDir(), "gone"), 0o644)}})
		if !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Write = %v, want a not-exist error", err)
		}
	})
}
