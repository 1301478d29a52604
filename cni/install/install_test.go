package install

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// testOwner is the user the test runs as: what Install must make owner of
// what it writes when the test cannot run as root.
func testOwner() owner { return owner{uid: os.Getuid(), gid: os.Getgid()} }

// newInstall returns options installing a binary into fresh directories
// under a directory of mode 0755.
func newInstall(t *testing.T) Options {
	t.Helper()
	root := filepath.Join(t.TempDir(), "node")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(root, "src-lockstep")
	if err := os.WriteFile(src, []byte("binary v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	return Options{Source: src, BinDir: filepath.Join(root, "bin"), ConfDir: filepath.Join(root, "net.d"), owner: testOwner()}
}

func TestInstallIsIdempotent(t *testing.T) {
	root := t.TempDir()
	src := filepath.Join(root, "src-lockstep")
	if err := os.WriteFile(src, []byte("binary v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	o := Options{Source: src, BinDir: filepath.Join(root, "bin"), ConfDir: filepath.Join(root, "net.d"), Socket: "/run/x.sock", owner: testOwner()}

	res, err := Install(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Changed) != 3 {
		t.Fatalf("first install changed %v, want binary, symlink and config", res.Changed)
	}
	if target, _ := os.Readlink(filepath.Join(o.BinDir, PluginName)); target != BinaryName {
		t.Fatalf("symlink points at %q", target)
	}
	raw, _ := os.ReadFile(filepath.Join(o.ConfDir, DefaultConfName))
	var conf struct {
		CNIVersion string           `json:"cniVersion"`
		Name       string           `json:"name"`
		Plugins    []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(raw, &conf); err != nil {
		t.Fatal(err)
	}
	if conf.CNIVersion != DefaultCNIVersion || conf.Name != "lockstep" || conf.Plugins[0]["type"] != PluginName || conf.Plugins[0]["socket"] != "/run/x.sock" {
		t.Fatalf("config: %s", raw)
	}

	res, err = Install(o)
	if err != nil || len(res.Changed) != 0 {
		t.Fatalf("second install changed %v (%v), want nothing", res.Changed, err)
	}

	// A new binary replaces the old one; nothing else changes.
	if err := os.WriteFile(src, []byte("binary v2"), 0o755); err != nil {
		t.Fatal(err)
	}
	res, err = Install(o)
	if err != nil || !slices.Equal(res.Changed, []string{filepath.Join(o.BinDir, BinaryName)}) {
		t.Fatalf("upgrade changed %v (%v)", res.Changed, err)
	}
	entries, _ := os.ReadDir(o.BinDir)
	if len(entries) != 2 {
		t.Fatalf("bin dir holds %d entries, want 2 (no temporaries left)", len(entries))
	}
}

func TestInstallErrors(t *testing.T) {
	root := t.TempDir()
	if _, err := Install(Options{Source: filepath.Join(root, "missing"), BinDir: root, ConfDir: root, owner: testOwner()}); err == nil {
		t.Error("missing source: want error")
	}
	if _, err := ConfList(Options{Socket: "relative.sock"}); err == nil {
		t.Error("relative socket: want error")
	}
	// A version the plugin does not speak is refused before anything is
	// written.
	src := filepath.Join(root, "src-lockstep")
	if err := os.WriteFile(src, []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	bin, conf := filepath.Join(root, "bin"), filepath.Join(root, "net.d")
	_, err := Install(Options{Source: src, BinDir: bin, ConfDir: conf, CNIVersion: "1.2.0", owner: testOwner()})
	if err == nil || !strings.Contains(err.Error(), `"1.2.0"`) || !strings.Contains(err.Error(), "0.3.0, 0.3.1, 0.4.0, 1.0.0, 1.1.0") {
		t.Errorf("CNI version 1.2.0: %v, want a refusal naming the supported versions", err)
	}
	for _, dir := range []string{bin, conf} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("%s exists after a refused install", dir)
		}
	}
}

func TestConfListCNIVersion(t *testing.T) {
	tests := []struct {
		version string
		want    string // the rendered cniVersion; "" for a refusal
	}{
		{"", "1.0.0"}, // containerd 1.6 and 1.7 refuse 1.1.0
		{"1.0.0", "1.0.0"},
		{"1.1.0", "1.1.0"},
		{"0.4.0", "0.4.0"},
		{"0.3.0", "0.3.0"},
		{"0.2.0", ""},
		{"1.2.0", ""},
		{"v1.0.0", ""},
		{"1.0", ""},
	}
	for _, tt := range tests {
		t.Run(tt.version, func(t *testing.T) {
			raw, err := ConfList(Options{CNIVersion: tt.version, Portmap: true})
			if tt.want == "" {
				if err == nil || !strings.Contains(err.Error(), "does not speak CNI version") {
					t.Fatalf("ConfList(%q) = %s, %v; want a refusal", tt.version, raw, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var conf struct {
				CNIVersion string           `json:"cniVersion"`
				Plugins    []map[string]any `json:"plugins"`
			}
			if err := json.Unmarshal(raw, &conf); err != nil {
				t.Fatal(err)
			}
			if conf.CNIVersion != tt.want || len(conf.Plugins) != 2 {
				t.Errorf("ConfList(%q) = %s, want cniVersion %s and portmap chained", tt.version, raw, tt.want)
			}
		})
	}
}

// TestInstallFixesModeOfUnchangedFiles: a binary or config someone made
// writable keeps its content, so a content check alone calls it
// unchanged; Install puts its mode back and says so.
func TestInstallFixesModeOfUnchangedFiles(t *testing.T) {
	o := newInstall(t)
	if _, err := Install(o); err != nil {
		t.Fatal(err)
	}
	bin, conf := filepath.Join(o.BinDir, BinaryName), filepath.Join(o.ConfDir, DefaultConfName)
	for path, mode := range map[string]os.FileMode{bin: 0o777, conf: 0o666} {
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
	}
	res, err := Install(o)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Changed, []string{bin, conf}) {
		t.Errorf("changed %v, want the binary and the config whose modes were fixed", res.Changed)
	}
	for path, want := range map[string]os.FileMode{bin: 0o755, conf: 0o644} {
		if st, err := os.Stat(path); err != nil || st.Mode() != want {
			t.Errorf("%s: mode %v (%v), want %v", path, st.Mode(), err, want)
		}
	}
	// A symlink planted where the binary goes is replaced, not followed.
	victim := filepath.Join(filepath.Dir(o.BinDir), "victim")
	if err := os.WriteFile(victim, []byte("binary v1"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(bin); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, bin); err != nil {
		t.Fatal(err)
	}
	if _, err := Install(o); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Lstat(bin); err != nil || !st.Mode().IsRegular() {
		t.Errorf("%s is still not a regular file: %v, %v", bin, st.Mode(), err)
	}
	if st, _ := os.Stat(victim); st.Mode().Perm() != 0o600 {
		t.Errorf("the symlink's target had its mode changed to %v", st.Mode().Perm())
	}
}

// TestInstallRefusesUnsafeDirs: the runtime executes what is in the bin
// directory as root, for every pod. A directory that someone other than
// root may write is refused, with what to do, before anything is written.
func TestInstallRefusesUnsafeDirs(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(o Options) error
		wantErr string // empty: accepted
	}{
		{name: "safe directories", setup: func(Options) error { return nil }},
		{name: "world-writable bin dir", setup: func(o Options) error { return os.Chmod(o.BinDir, 0o777) }, wantErr: "bin is group- or world-writable (-rwxrwxrwx)"},
		{name: "group-writable conf dir", setup: func(o Options) error { return os.Chmod(o.ConfDir, 0o775) }, wantErr: "net.d is group- or world-writable"},
		{name: "world-writable sticky bin dir", setup: func(o Options) error { return os.Chmod(o.BinDir, 0o777|os.ModeSticky) }, wantErr: "world-writable"},
		{name: "world-writable parent", setup: func(o Options) error { return os.Chmod(filepath.Dir(o.BinDir), 0o777) }, wantErr: "node is group- or world-writable"},
		{name: "sticky world-writable parent, like /tmp", setup: func(o Options) error { return os.Chmod(filepath.Dir(o.BinDir), 0o777|os.ModeSticky) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := newInstall(t)
			for _, d := range []string{o.BinDir, o.ConfDir} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			if err := tt.setup(o); err != nil {
				t.Fatal(err)
			}
			_, err := Install(o)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Install: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrUnsafeDir) || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "chmod go-w") {
				t.Fatalf("Install = %v; want ErrUnsafeDir saying %q and what to run", err, tt.wantErr)
			}
			for _, p := range []string{filepath.Join(o.BinDir, BinaryName), filepath.Join(o.ConfDir, DefaultConfName)} {
				if _, err := os.Lstat(p); !os.IsNotExist(err) {
					t.Errorf("%s written despite the refusal", p)
				}
			}
		})
	}
}
