package install

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
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
	if conf.CNIVersion != "1.1.0" || conf.Name != "lockstep" || conf.Plugins[0]["type"] != PluginName || conf.Plugins[0]["socket"] != "/run/x.sock" {
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
	if _, err := ConfList("relative.sock", false); err == nil {
		t.Error("relative socket: want error")
	}
}
