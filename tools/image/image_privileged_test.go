//go:build linux

package main

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"lockstep.dev/lockstep/internal/ociimage"
	"lockstep.dev/lockstep/probe/nodesim"
	"lockstep.dev/lockstep/test/testenv"
)

// netnsPrefix names the namespaces this test makes (nodesim.Name).
const netnsPrefix = "lsimg"

// testVersion is linked into the lockstep binary the test puts in the
// image, so `lockstep version` in the image proves it runs that binary.
const testVersion = "image-test"

// TestPrivilegedLockstepImage builds the lockstep image from this machine's
// packages, then proves it complete twice: its layer, extracted and entered
// with chroot inside a throwaway network namespace, runs lockstep and every
// dataplane tool (so no library, extension or data file is missing); and a
// throwaway containerd imports it under the name Kubernetes' `image:
// lockstep:dev` looks up.
func TestPrivilegedLockstepImage(t *testing.T) {
	testenv.Privileged(t)
	if _, err := nodesim.SweepStale(netnsPrefix); err != nil {
		t.Logf("sweep namespaces of earlier runs: %v", err)
	}
	work := t.TempDir()
	bin := buildLockstep(t, work)
	img, err := lockstepImage("lockstep:dev", bin, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	archive := filepath.Join(work, "lockstep-image.tar")
	written, err := writeImage(archive, img)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: %s, %d entries", written.Reference, written.ManifestDigest, written.Entries)

	t.Run("chroot", func(t *testing.T) { testImageRuns(t, archive) })
	t.Run("containerd", func(t *testing.T) {
		pause, err := buildPause(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		pauseImg, err := pauseImage("registry.k8s.io/pause:3.10", pause)
		if err != nil {
			t.Fatal(err)
		}
		pauseArchive := filepath.Join(t.TempDir(), "pause-image.tar")
		pauseWritten, err := writeImage(pauseArchive, pauseImg)
		if err != nil {
			t.Fatal(err)
		}
		testContainerdImports(t, map[string]ociimage.Written{archive: written, pauseArchive: pauseWritten})
	})
}

// buildLockstep builds the static lockstep binary as `make build` does,
// with testVersion linked in.
func buildLockstep(t *testing.T, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "lockstep")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w -X lockstep.dev/lockstep/internal/buildinfo.Version="+testVersion,
		"-o", out, "lockstep.dev/lockstep/cmd/lockstep")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build lockstep: %v\n%s", err, b)
	}
	return out
}

// testImageRuns extracts the image's layer with the host's tar and runs
// the tools in it, each under chroot, in a fresh mount namespace with its
// own /proc, inside one network namespace made for the test.
func testImageRuns(t *testing.T, archive string) {
	root := filepath.Join(t.TempDir(), "rootfs")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	extractLayer(t, archive, root)

	n, err := nodesim.Create(nodesim.Name(netnsPrefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := nodesim.Delete(n); err != nil {
			t.Errorf("delete the test namespace: %v", err)
		}
	})

	tests := []struct {
		name  string
		args  []string
		env   []string
		stdin string
		want  []string // in the output
	}{
		{name: "lockstep version", args: []string{"lockstep", "version"}, want: []string{"lockstep " + testVersion}},
		{name: "lockstep-cni VERSION", args: []string{"lockstep-cni"}, env: []string{"CNI_COMMAND=VERSION"}, want: []string{`"supportedVersions"`}},

		{name: "iptables-nft rule", args: []string{"iptables-nft", "-A", "INPUT", "-p", "sctp", "--dport", "80", "-m", "comment", "--comment", "lockstep-image", "-j", "ACCEPT"}},
		{name: "iptables-nft-restore", args: []string{"iptables-nft-restore", "--noflush"}, stdin: "*filter\n-A FORWARD -s 10.0.0.1/32 -m conntrack --ctstate NEW -j DROP\nCOMMIT\n"},
		{name: "iptables-nft-save", args: []string{"iptables-nft-save"}, want: []string{
			"-A INPUT -p sctp -m sctp --dport 80 -m comment --comment lockstep-image -j ACCEPT",
			"-A FORWARD -s 10.0.0.1/32 -m conntrack --ctstate NEW -j DROP",
		}},
		{name: "ipset create", args: []string{"ipset", "create", "lockstep-image", "hash:net", "family", "inet6"}},
		{name: "ipset add", args: []string{"ipset", "add", "lockstep-image", "fd00:10:244::/64"}},
		{name: "ip6tables-nft rules", args: []string{"ip6tables-nft", "-A", "INPUT", "-p", "icmpv6", "--icmpv6-type", "echo-request", "-m", "set", "--match-set", "lockstep-image", "src", "-j", "ACCEPT"}},
		{name: "ip6tables-nft-save", args: []string{"ip6tables-nft-save"}, want: []string{
			// ipv6-icmp is /etc/protocols' name for 58.
			"-A INPUT -p ipv6-icmp -m icmp6 --icmpv6-type 128 -m set --match-set lockstep-image src -j ACCEPT",
		}},
		{name: "ipset list", args: []string{"ipset", "list", "lockstep-image"}, want: []string{"Type: hash:net", "fd00:10:244::/64", "References: 1"}},

		{name: "iptables-legacy rule", args: []string{"iptables-legacy", "-A", "FORWARD", "-p", "udp", "-m", "multiport", "--dports", "53,5353", "-j", "DROP"}},
		{name: "iptables-legacy-restore", args: []string{"iptables-legacy-restore", "--noflush"}, stdin: "*nat\n-A POSTROUTING -s 10.244.0.0/24 ! -d 10.244.0.0/16 -j MASQUERADE\nCOMMIT\n"},
		{name: "iptables-legacy-save", args: []string{"iptables-legacy-save"}, want: []string{
			"-A FORWARD -p udp -m multiport --dports 53,5353 -j DROP",
			"-A POSTROUTING -s 10.244.0.0/24 ! -d 10.244.0.0/16 -j MASQUERADE",
		}},
		{name: "ip6tables-legacy-restore", args: []string{"ip6tables-legacy-restore", "--noflush"}, stdin: "*filter\n-A OUTPUT -p tcp --dport 443 -j REJECT --reject-with tcp-reset\nCOMMIT\n"},
		{name: "ip6tables-legacy-save", args: []string{"ip6tables-legacy-save"}, want: []string{"-A OUTPUT -p tcp -m tcp --dport 443 -j REJECT --reject-with tcp-reset"}},

		// The plain names point at iptables-nft, Debian's default.
		{name: "iptables-save", args: []string{"iptables-save"}, want: []string{"--comment lockstep-image"}},
	}
	for _, tt := range tests {
		cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "--mount-proc=" + filepath.Join(root, "proc"), "chroot", root}, tt.args...)...)
		cmd.Env = append([]string{"PATH=/usr/local/bin:/usr/sbin:/usr/bin"}, tt.env...)
		cmd.Stdin = strings.NewReader(tt.stdin)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := nodesim.Start(n, cmd)
		if err == nil {
			err = cmd.Wait()
		}
		if err != nil {
			t.Fatalf("%s: %v\n%s", tt.name, err, out.String())
		}
		for _, w := range tt.want {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: output lacks %q:\n%s", tt.name, w, out.String())
			}
		}
	}
}

// extractLayer writes the image's only layer, found through manifest.json
// as docker load finds it, into dir with the host's tar.
func extractLayer(t *testing.T, archive, dir string) {
	t.Helper()
	files := readArchiveFiles(t, archive)
	var manifest []struct{ Layers []string }
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil || len(manifest) != 1 || len(manifest[0].Layers) != 1 {
		t.Fatalf("manifest.json: %v: %s", err, files["manifest.json"])
	}
	layer, ok := files[manifest[0].Layers[0]]
	if !ok {
		t.Fatalf("the archive has no %s", manifest[0].Layers[0])
	}
	cmd := exec.Command("tar", "-x", "-C", dir)
	cmd.Stdin = bytes.NewReader(layer)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("extract the layer: %v\n%s", err, b)
	}
}

func readArchiveFiles(t *testing.T, archive string) map[string][]byte {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatalf("read %s: %v", archive, err)
		}
		if hdr.Typeflag == tar.TypeReg {
			if files[hdr.Name], err = io.ReadAll(tr); err != nil {
				t.Fatalf("read %s in %s: %v", hdr.Name, archive, err)
			}
		}
	}
}

// testContainerdImports starts a containerd of its own and imports each
// archive twice, as the README says (ctr -n k8s.io images import FILE) and
// as kind load image-archive does (from stdin, all platforms, digests),
// then checks ctr lists each image under its full name and digest.
func testContainerdImports(t *testing.T, archives map[string]ociimage.Written) {
	for _, tool := range []string{"containerd", "ctr", "unshare"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v (install containerd: make deps)", tool, err)
		}
	}
	sock := startContainerd(t)
	ctr := func(stdin io.Reader, args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", sock, "--namespace", "k8s.io"}, args...)...)
		cmd.Stdin = stdin
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("ctr %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	for archive, w := range archives {
		ctr(nil, "images", "import", archive)
		listed := ctr(nil, "images", "ls", "name=="+w.Reference.String())
		if !strings.Contains(listed, w.Reference.String()) || !strings.Contains(listed, w.ManifestDigest) {
			t.Errorf("after ctr images import %s, ctr images ls shows:\n%s\nwant %s at %s", filepath.Base(archive), listed, w.Reference, w.ManifestDigest)
		}
		f, err := os.Open(archive)
		if err != nil {
			t.Fatal(err)
		}
		ctr(f, "images", "import", "--all-platforms", "--digests", "--snapshotter=overlayfs", "-")
		f.Close()
	}
	names := strings.Fields(ctr(nil, "images", "ls", "-q"))
	for _, w := range archives {
		if !slices.Contains(names, w.Reference.String()) {
			t.Errorf("ctr images ls -q = %q, want %s", names, w.Reference)
		}
	}
	if !slices.Contains(names, "docker.io/library/lockstep:dev") {
		t.Errorf("ctr images ls -q = %q: Kubernetes' image: lockstep:dev would not be found", names)
	}
}

// startContainerd runs containerd with its own root, state, socket and
// config (no CRI plugin, nothing under the machine's own containerd
// directories), in a mount namespace of its own so any mount it makes while
// unpacking ends with it. It is stopped when the test ends, and its log is
// shown if the test failed.
func startContainerd(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	sock := filepath.Join(dir, "containerd.sock")
	config := filepath.Join(dir, "config.toml")
	err := os.WriteFile(config, []byte(fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.grpc.v1.cri"]

[grpc]
  address = %[3]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, filepath.Join(dir, "opt"))), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "containerd.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("unshare", "--mount", "--propagation", "private",
		"containerd", "--config", config, "--root", filepath.Join(dir, "root"), "--state", filepath.Join(dir, "state"), "--address", sock)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		t.Fatalf("start containerd: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		// unshare execs containerd: the process started is containerd.
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logFile.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("containerd log:\n%s", tail(b, 40))
			}
		}
	})

	deadline := time.Now().Add(20 * time.Second)
	for {
		err := exec.Command("ctr", "--address", sock, "version").Run()
		if err == nil {
			return sock
		}
		select {
		case werr := <-done:
			done <- werr
			t.Fatalf("containerd exited before answering: %v", werr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("containerd did not answer on %s within 20s: %v", sock, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// tail returns the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
