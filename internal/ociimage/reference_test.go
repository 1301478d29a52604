package ociimage

import (
	"errors"
	"testing"
)

func TestParseReference(t *testing.T) {
	tests := []struct {
		name     string
		full     string
		familiar string
		tag      string
	}{
		{"lockstep:dev", "docker.io/library/lockstep:dev", "lockstep:dev", "dev"},
		{"lockstep", "docker.io/library/lockstep:latest", "lockstep:latest", "latest"},
		{"docker.io/library/lockstep:dev", "docker.io/library/lockstep:dev", "lockstep:dev", "dev"},
		{"index.docker.io/library/lockstep:dev", "docker.io/library/lockstep:dev", "lockstep:dev", "dev"},
		{"team/agnhost:2.52", "docker.io/team/agnhost:2.52", "team/agnhost:2.52", "2.52"},
		{"registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.10", "registry.k8s.io/pause:3.10", "3.10"},
		{"localhost/lockstep:dev", "localhost/lockstep:dev", "localhost/lockstep:dev", "dev"},
		{"localhost:5000/e2e/agnhost:v1", "localhost:5000/e2e/agnhost:v1", "localhost:5000/e2e/agnhost:v1", "v1"},
		{"registry.example/a/b/c:x_y-z.1", "registry.example/a/b/c:x_y-z.1", "registry.example/a/b/c:x_y-z.1", "x_y-z.1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ref, err := ParseReference(tt.name)
			if err != nil {
				t.Fatal(err)
			}
			if got := ref.String(); got != tt.full {
				t.Errorf("String() = %q, want %q", got, tt.full)
			}
			if got := ref.Familiar(); got != tt.familiar {
				t.Errorf("Familiar() = %q, want %q", got, tt.familiar)
			}
			if ref.Tag != tt.tag {
				t.Errorf("Tag = %q, want %q", ref.Tag, tt.tag)
			}
		})
	}
}

func TestParseReferenceRejects(t *testing.T) {
	for _, name := range []string{
		"",
		"Lockstep:dev",               // upper case in a path
		"lockstep:",                  // empty tag
		"lockstep:-dev",              // a tag starts with a word character
		"lockstep@sha256:0123456789", // a digest is not a name
		"lock step:dev",
		"/lockstep:dev",
		"lockstep//x:dev",
		"bad_domain.example/x:dev",
	} {
		t.Run(name, func(t *testing.T) {
			ref, err := ParseReference(name)
			if !errors.Is(err, ErrInvalidReference) {
				t.Fatalf("ParseReference(%q) = %v, %v; want ErrInvalidReference", name, ref, err)
			}
		})
	}
}
