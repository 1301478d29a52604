//go:build linux

package main

import (
	"runtime"
	"slices"
	"testing"

	"lockstep.dev/lockstep/internal/ociimage"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"  ", nil},
		{"/agnhost netexec --http-port=8080", []string{"/agnhost", "netexec", "--http-port=8080"}},
		{`["/agnhost", "serve-hostname", "--port", "9376 x"]`, []string{"/agnhost", "serve-hostname", "--port", "9376 x"}},
	}
	for _, tt := range tests {
		got, err := parseArgs(tt.in)
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("parseArgs(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	if _, err := parseArgs(`["/agnhost", 1]`); err == nil {
		t.Error(`parseArgs(["/agnhost", 1]) accepted a number`)
	}
}

func TestReference(t *testing.T) {
	tests := []struct {
		name, tag, want string
		wantErr         bool
	}{
		{"lockstep", "dev", "lockstep:dev", false},
		{"registry.k8s.io/pause", "3.10", "registry.k8s.io/pause:3.10", false},
		{"localhost:5000/e2e/agnhost", "v1", "localhost:5000/e2e/agnhost:v1", false},
		{"lockstep:dev", "dev", "", true}, // the tag goes in -tag
		{"Lockstep", "dev", "", true},
		{"lockstep", "", "", true},
	}
	for _, tt := range tests {
		got, err := reference(tt.name, tt.tag)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("reference(%q, %q) = %q, %v; want %q (error %v)", tt.name, tt.tag, got, err, tt.want, tt.wantErr)
		}
	}
}

// TestPauseImage builds tools/image/pause and checks the image has what a
// kubelet's sandbox needs from registry.k8s.io/pause.
func TestPauseImage(t *testing.T) {
	bin, err := buildPause(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	img, err := pauseImage("registry.k8s.io/pause:3.10", bin)
	if err != nil {
		t.Fatal(err)
	}
	c := img.Config
	if !slices.Equal(c.Entrypoint, []string{"/pause"}) || c.User != "65535:65535" || c.Architecture != runtime.GOARCH {
		t.Errorf("config = %+v, want entrypoint /pause, user 65535:65535, architecture %s", c, runtime.GOARCH)
	}
	i := slices.IndexFunc(img.Entries, func(e ociimage.Entry) bool { return e.Path == "/pause" })
	if i < 0 || img.Entries[i].Source != bin || img.Entries[i].Mode.Perm() != 0o755 {
		t.Errorf("entries = %+v, want %s at /pause, mode 0755", img.Entries, bin)
	}
	w, err := writeImage(t.TempDir()+"/pause.tar", img)
	if err != nil {
		t.Fatal(err)
	}
	if w.Reference.String() != "registry.k8s.io/pause:3.10" {
		t.Errorf("written as %s", w.Reference)
	}
	w2, err := writeImage(t.TempDir()+"/pause.tar", img)
	if err != nil {
		t.Fatal(err)
	}
	if w2.ManifestDigest != w.ManifestDigest {
		t.Errorf("two writes of one pause image: %s and %s", w.ManifestDigest, w2.ManifestDigest)
	}

	if !slices.Equal(c.Env, []string{imagePATH}) {
		t.Errorf("env = %q, want only %q", c.Env, imagePATH)
	}
	own, err := binaryImage("x:y", bin, "/bin/x", ociimage.Config{Env: []string{"PATH=/bin", "A=b"}, Cmd: []string{"-v"}})
	if err != nil {
		t.Fatal(err)
	}
	if oc := own.Config; !slices.Equal(oc.Env, []string{"PATH=/bin", "A=b"}) || !slices.Equal(oc.Entrypoint, []string{"/bin/x"}) || !slices.Equal(oc.Cmd, []string{"-v"}) {
		t.Errorf("binaryImage with its own PATH: config %+v", oc)
	}
	if _, err := binaryImage("x:y", bin, "relative/pause", ociimage.Config{}); err == nil {
		t.Error("binaryImage accepted a relative path in the image")
	}
}
