//go:build linux

package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"lockstep.dev/lockstep/internal/ociimage"
)

// binaryImage is an image of one static binary at imagePath, for the
// end-to-end harness (agnhost, a test server) and the pause image. PATH is
// set unless cfg.Env sets it; the entrypoint is the binary unless cfg has
// one.
func binaryImage(name, bin, imagePath string, cfg ociimage.Config) (ociimage.Image, error) {
	arch, err := staticELF(bin)
	if err != nil {
		return ociimage.Image{}, err
	}
	if !path.IsAbs(imagePath) {
		return ociimage.Image{}, fmt.Errorf("the binary's path in the image %q is not absolute", imagePath)
	}
	cfg.Architecture = arch
	if len(cfg.Entrypoint) == 0 {
		cfg.Entrypoint = []string{imagePath}
	}
	if !slices.ContainsFunc(cfg.Env, func(kv string) bool { return strings.HasPrefix(kv, "PATH=") }) {
		cfg.Env = append([]string{imagePATH}, cfg.Env...)
	}
	if cfg.WorkingDir == "" {
		cfg.WorkingDir = "/"
	}
	return ociimage.Image{
		Name:   name,
		Config: cfg,
		Entries: []ociimage.Entry{
			ociimage.File(imagePath, bin, 0o755),
			ociimage.Dir("/tmp", fs.ModeSticky|0o777),
		},
		CreatedBy: "lockstep tools/image binary " + path.Base(imagePath),
	}, nil
}

// pauseUser is the user registry.k8s.io/pause runs as; the sandbox needs
// no privileges.
const pauseUser = "65535:65535"

// pauseImage is a sandbox image that can stand in for
// registry.k8s.io/pause: the static program of tools/image/pause at /pause,
// run as 65535:65535.
func pauseImage(name, bin string) (ociimage.Image, error) {
	img, err := binaryImage(name, bin, "/pause", ociimage.Config{
		User:   pauseUser,
		Labels: map[string]string{"org.opencontainers.image.title": "lockstep pause"},
	})
	if err != nil {
		return ociimage.Image{}, err
	}
	img.CreatedBy = "lockstep tools/image pause"
	return img, nil
}

// buildPause compiles tools/image/pause into dir, static and stripped, with
// the go command of $GO (default go) from the current module.
func buildPause(dir string) (string, error) {
	goCmd := os.Getenv("GO")
	if goCmd == "" {
		goCmd = "go"
	}
	out := filepath.Join(dir, "pause")
	cmd := exec.Command(goCmd, "build", "-trimpath", "-ldflags", "-s -w", "-o", out, "lockstep.dev/lockstep/tools/image/pause")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("build tools/image/pause: %w (run from the lockstep repository, or pass -bin)", err)
	}
	return out, nil
}

// parseArgs reads an entrypoint or command given on the command line,
// either as a JSON array (["/agnhost","netexec"]) or as words separated by
// spaces.
func parseArgs(s string) ([]string, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	if strings.HasPrefix(s, "[") {
		var args []string
		if err := json.Unmarshal([]byte(s), &args); err != nil {
			return nil, fmt.Errorf("read %s as a JSON array of strings: %w", s, err)
		}
		return args, nil
	}
	return strings.Fields(s), nil
}
