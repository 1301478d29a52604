//go:build linux

package realnode

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Images the cluster's pods run, under the names the upstream e2e tests
// use, so that their pods find them imported.
const (
	AgnhostImage = "registry.k8s.io/e2e-test-images/agnhost:2.53"
	BusyboxImage = "registry.k8s.io/e2e-test-images/busybox:1.36.1-1"
	// LockstepImage is what deploy/ runs.
	LockstepImage = "lockstep:dev"
	// CoreDNSImage is the cluster DNS (coredns.yaml).
	CoreDNSImage = "registry.k8s.io/coredns/coredns:v1.12.4"
)

// ImageOptions configure BuildImages.
type ImageOptions struct {
	// Repo is the lockstep repository.
	Repo string
	// KubeBinDir holds agnhost (tools/kube-testenv/build.sh).
	KubeBinDir string
	// Logf receives progress; nil discards it.
	Logf func(string, ...any)
}

// BuildImages builds the image archives every node imports, into the
// repository's bin/: lockstep's own (`make image`), the pause image, the
// upstream test server agnhost, CoreDNS, and a busybox (Debian's
// busybox-static with a link per applet).
func BuildImages(ctx context.Context, o ImageOptions) ([]string, error) {
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	dir := filepath.Join(o.Repo, "bin", "e2e-images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	run := func(name string, args ...string) error {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = o.Repo
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("build images: %s %s: %w\n%s", name, strings.Join(args, " "), err, out)
		}
		return nil
	}
	o.Logf("realnode: building images (make image, pause, agnhost, coredns, busybox)")
	if err := run("make", "image"); err != nil {
		return nil, err
	}
	tool := filepath.Join(dir, "image")
	if err := run("go", "build", "-o", tool, "./tools/image"); err != nil {
		return nil, err
	}
	pause := filepath.Join(dir, "pause.tar")
	name, tag, _ := strings.Cut(PauseImage, ":")
	if err := run(tool, "pause", "-name", name, "-tag", tag, "-out", pause); err != nil {
		return nil, err
	}
	agnhost := filepath.Join(dir, "agnhost.tar")
	name, tag, _ = strings.Cut(AgnhostImage, ":")
	if err := run(tool, "binary", "-bin", filepath.Join(o.KubeBinDir, "agnhost"), "-name", name, "-tag", tag,
		"-path", "/agnhost", "-out", agnhost); err != nil {
		return nil, err
	}
	coredns := filepath.Join(dir, "coredns.tar")
	name, tag, _ = strings.Cut(CoreDNSImage, ":")
	if err := run(tool, "binary", "-bin", filepath.Join(o.KubeBinDir, "coredns"), "-name", name, "-tag", tag,
		"-path", "/coredns", "-out", coredns); err != nil {
		return nil, err
	}
	busybox := filepath.Join(dir, "busybox.tar")
	name, tag, _ = strings.Cut(BusyboxImage, ":")
	args := []string{"binary", "-bin", "/bin/busybox", "-name", name, "-tag", tag, "-path", "/bin/busybox",
		"-entrypoint", "/bin/sh", "-out", busybox}
	applets, err := busyboxApplets(ctx)
	if err != nil {
		return nil, err
	}
	for _, a := range applets {
		args = append(args, "-link", "/bin/"+a)
	}
	if err := run(tool, args...); err != nil {
		return nil, err
	}
	return []string{filepath.Join(o.Repo, "bin", "lockstep-image.tar"), pause, agnhost, coredns, busybox}, nil
}

// busyboxApplets lists the applets of the machine's busybox.
func busyboxApplets(ctx context.Context) ([]string, error) {
	out, err := exec.CommandContext(ctx, "/bin/busybox", "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("list busybox applets: %w (run make deps: Debian's busybox-static)", err)
	}
	var applets []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if a := strings.TrimSpace(sc.Text()); a != "" && a != "busybox" && !strings.Contains(a, "/") {
			applets = append(applets, a)
		}
	}
	return applets, nil
}
