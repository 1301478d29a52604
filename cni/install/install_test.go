package install

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestInstallIsIdempotent(t *testing.T) {
	root := t.TempDir()
	src := filepath.Join(root, "src-lockstep")
	if err := os.WriteFile(src, []byte("binary v1"), 0o755); err != nil {
		t.Fatal(err)
	}
	o := Options{Source: src, BinDir: filepath.Join(root, "bin"), ConfDir: filepath.Join(root, "net.d"), Socket: "/run/x.sock"}

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
	if _, err := Install(Options{Source: filepath.Join(root, "missing"), BinDir: root, ConfDir: root}); err == nil {
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
	_, err := Install(Options{Source: src, BinDir: bin, ConfDir: conf, CNIVersion: "1.2.0"})
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
