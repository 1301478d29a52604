package install

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestUninstall(t *testing.T) {
	installed := func(t *testing.T) Options {
		t.Helper()
		root := t.TempDir()
		src := filepath.Join(root, "src-lockstep")
		if err := os.WriteFile(src, []byte("binary"), 0o755); err != nil {
			t.Fatal(err)
		}
		o := Options{Source: src, BinDir: filepath.Join(root, "bin"), ConfDir: filepath.Join(root, "net.d")}
		if _, err := Install(o); err != nil {
			t.Fatal(err)
		}
		// Neighbours that are not lockstep's.
		for _, p := range []string{filepath.Join(o.BinDir, "portmap"), filepath.Join(o.ConfDir, "20-other.conflist")} {
			if err := os.WriteFile(p, []byte(`{"plugins":[{"type":"bridge"}]}`), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return o
	}
	all := func(o Options) []string {
		return []string{filepath.Join(o.BinDir, BinaryName), filepath.Join(o.BinDir, PluginName), filepath.Join(o.ConfDir, DefaultConfName)}
	}
	tests := []struct {
		name    string
		prepare func(t *testing.T, o Options)
		removed func(o Options) []string
		kept    string // part of the one Kept entry, if any
		err     string
	}{
		{"as installed", func(*testing.T, Options) {}, all, "", ""},
		{"with an interrupted install's temporary files", func(t *testing.T, o Options) {
			for _, p := range []string{filepath.Join(o.ConfDir, "."+DefaultConfName+".tmp-123"), filepath.Join(o.BinDir, PluginName+".tmp")} {
				if err := os.WriteFile(p, nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}, func(o Options) []string {
			return append(all(o), filepath.Join(o.ConfDir, "."+DefaultConfName+".tmp-123"), filepath.Join(o.BinDir, PluginName+".tmp"))
		}, "", ""},
		{"a config at lockstep's name that does not run lockstep", func(t *testing.T, o Options) {
			if err := os.WriteFile(filepath.Join(o.ConfDir, DefaultConfName), []byte(`{"name":"x","plugins":[{"type":"bridge"}]}`), 0o644); err != nil {
				t.Fatal(err)
			}
		}, func(o Options) []string { return all(o)[:2] }, "do not include lockstep-cni", ""},
		{"a directory where the binary was", func(t *testing.T, o Options) {
			bin := filepath.Join(o.BinDir, BinaryName)
			if err := os.Remove(bin); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(bin, "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, func(o Options) []string { return []string{all(o)[1], all(o)[2]} }, "", "it is a directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := installed(t)
			tt.prepare(t, o)
			res, err := Uninstall(o)
			if tt.err == "" && err != nil || tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)) {
				t.Fatalf("Uninstall error %v, want %q", err, tt.err)
			}
			want := tt.removed(o)
			slices.Sort(want)
			if !slices.Equal(res.Removed, want) {
				t.Errorf("removed %q\nwant %q", res.Removed, want)
			}
			if tt.kept == "" && len(res.Kept) > 0 || tt.kept != "" && (len(res.Kept) != 1 || !strings.Contains(res.Kept[0], tt.kept)) {
				t.Errorf("kept %q, want %q", res.Kept, tt.kept)
			}
			for _, p := range []string{filepath.Join(o.BinDir, "portmap"), filepath.Join(o.ConfDir, "20-other.conflist")} {
				if _, err := os.Stat(p); err != nil {
					t.Errorf("%s: %v; a file that is not lockstep's was removed", p, err)
				}
			}
			again, err := Uninstall(o)
			if len(again.Removed) != 0 || (err == nil) != (tt.err == "") {
				t.Errorf("second Uninstall removed %q (%v), want nothing", again.Removed, err)
			}
		})
	}
}
