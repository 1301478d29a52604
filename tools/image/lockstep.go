//go:build linux

package main

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"lockstep.dev/lockstep/internal/ociimage"
)

// Where the lockstep image keeps things.
const (
	lockstepPath = "/usr/local/bin/lockstep"
	// imagePATH is the PATH of every image written here: the DaemonSet's
	// `command: [lockstep]` and the agent's iptables-nft-restore are
	// found through it.
	imagePATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// Label keys of the lockstep image, besides the OCI ones.
const (
	// labelPackages lists the Debian packages the image's files come
	// from, "name=version" separated by spaces.
	labelPackages = "dev.lockstep.image.packages"
	// labelDebian is the Debian release of the machine that built it.
	labelDebian = "dev.lockstep.image.debian"
)

// dataplaneTools are the programs the iptables dataplane runs (see
// agent/iptables), as Debian installs them.
var dataplaneTools = []string{"/usr/sbin/xtables-nft-multi", "/usr/sbin/xtables-legacy-multi", "/usr/sbin/ipset"}

// alternatives are the plain iptables names Debian points at one variant
// with update-alternatives. The image points them at nft, Debian's
// default; lockstep itself always names the variant (iptables-nft-save,
// iptables-legacy-restore, ...).
var alternatives = []string{"iptables", "iptables-save", "iptables-restore", "ip6tables", "ip6tables-save", "ip6tables-restore"}

// etcFiles are generated rather than copied: the least that glibc's name
// services and the operator's non-root user (65534) need.
var etcFiles = map[string]string{
	"/etc/nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\nnetworks: files\nprotocols: files\nservices: files\n",
	"/etc/passwd":        "root:x:0:0:root:/root:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
	"/etc/group":         "root:x:0:\nnogroup:x:65534:\n",
}

// lockstepImage is the image deploy/ runs: the static lockstep binary and
// what its dataplanes run at run time, taken from the build machine's
// Debian packages (iptables, ipset and the libraries they load).
func lockstepImage(name, bin string, progress func(string, ...any)) (ociimage.Image, error) {
	arch, err := staticELF(bin)
	if err != nil {
		return ociimage.Image{}, err
	}
	if arch != runtime.GOARCH {
		return ociimage.Image{}, fmt.Errorf("%s is for %s, but the iptables and ipset copied next to it are this machine's (%s); build the image on a %s machine", bin, arch, runtime.GOARCH, arch)
	}
	version, err := binaryVersion(bin)
	if err != nil {
		return ociimage.Image{}, err
	}
	dirs, err := libDirs(arch)
	if err != nil {
		return ociimage.Image{}, err
	}

	h := newHostFS()
	progress("copying iptables (nft and legacy), ipset and their libraries from this machine")
	for _, tool := range dataplaneTools {
		if err := h.AddELF(tool, dirs); err != nil {
			return ociimage.Image{}, fmt.Errorf("%w (install iptables and ipset: make deps)", err)
		}
	}
	if err := addToolNames(h); err != nil {
		return ociimage.Image{}, err
	}
	modules, err := filepath.Glob(filepath.Join("/usr/lib", multiarch[arch], "xtables", "*.so"))
	if err != nil || len(modules) == 0 {
		return ociimage.Image{}, fmt.Errorf("find the xtables extensions in /usr/lib/%s/xtables: %w (install iptables: make deps)", multiarch[arch], errNotFound)
	}
	progress("copying %d xtables extensions", len(modules))
	for _, m := range modules {
		if err := h.AddELF(m, dirs); err != nil {
			return ociimage.Image{}, err
		}
	}
	// iptables and ipset read protocol and service names through glibc:
	// `-p sctp`, `--dport ssh`.
	for _, p := range []string{"/etc/protocols", "/etc/services"} {
		if _, err := h.Add(p); err != nil {
			return ociimage.Image{}, fmt.Errorf("%w (install netbase)", err)
		}
	}
	// The merged-/usr links, so /sbin/iptables and /lib64/ld-linux-*.so
	// work as on the host.
	for _, p := range []string{"/bin", "/sbin", "/lib", "/lib64"} {
		if fi, err := os.Lstat(p); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			if _, err := h.Add(p); err != nil {
				return ociimage.Image{}, err
			}
		}
	}

	progress("reading the versions of the Debian packages copied")
	packages, err := packageVersions(h.Copied())
	if err != nil {
		return ociimage.Image{}, err
	}
	debian, err := debianVersion()
	if err != nil {
		return ociimage.Image{}, err
	}

	extra := []ociimage.Entry{
		ociimage.File(lockstepPath, bin, 0o755),
		ociimage.Symlink(lockstepPath+"-cni", "lockstep"),
		ociimage.Dir("/tmp", fs.ModeSticky|0o777),
		ociimage.Dir("/run", 0o755),
		// Mount points a runtime fills (iptables-legacy-save lists the
		// tables it saves in /proc/net).
		ociimage.Dir("/proc", 0o555),
		ociimage.Dir("/sys", 0o555),
		ociimage.Dir("/dev", 0o755),
	}
	for p, content := range etcFiles {
		extra = append(extra, ociimage.Bytes(p, []byte(content), 0o644))
	}
	for _, e := range extra {
		if err := h.Put(e); err != nil {
			return ociimage.Image{}, err
		}
	}
	return ociimage.Image{
		Name: name,
		Config: ociimage.Config{
			Entrypoint: []string{lockstepPath},
			Env:        []string{imagePATH},
			WorkingDir: "/",
			Labels: map[string]string{
				"org.opencontainers.image.title":       "lockstep",
				"org.opencontainers.image.description": "lockstep node networking: agent, CNI plugin and operator, with iptables and ipset for the iptables dataplane",
				"org.opencontainers.image.version":     version,
				labelPackages:                          strings.Join(packages, " "),
				labelDebian:                            debian,
			},
			Architecture: arch,
		},
		Entries:   h.Entries(),
		CreatedBy: "lockstep tools/image lockstep",
	}, nil
}

// addToolNames adds every name the iptables and ipset packages install for
// their multi-call binaries (iptables-nft-save, ip6tables-legacy-restore,
// ebtables-nft, ipset-translate, ...), and the plain alternatives names.
func addToolNames(h *hostFS) error {
	for _, pkg := range []string{"iptables", "ipset"} {
		files, err := packageFiles(pkg)
		if err != nil {
			return err
		}
		for _, f := range files {
			fi, err := os.Lstat(f)
			if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
				continue
			}
			real, err := filepath.EvalSymlinks(f)
			if err != nil || !isDataplaneTool(real) {
				continue
			}
			if _, err := h.Add(f); err != nil {
				return err
			}
		}
	}
	for _, name := range alternatives {
		if err := h.Put(ociimage.Symlink("/usr/sbin/"+name, "xtables-nft-multi")); err != nil {
			return err
		}
	}
	return nil
}

// isDataplaneTool reports whether the real path p is one of dataplaneTools,
// whichever spelling of /usr the host resolves it through.
func isDataplaneTool(p string) bool {
	for _, tool := range dataplaneTools {
		if real, err := filepath.EvalSymlinks(tool); err == nil && real == p {
			return true
		}
	}
	return false
}

// binaryVersion asks the lockstep binary its version, for the image's
// org.opencontainers.image.version label.
func binaryVersion(bin string) (string, error) {
	out, err := exec.Command(bin, "version").Output()
	if err != nil {
		return "", fmt.Errorf("run %s version: %w", bin, exitDetail(err))
	}
	// "lockstep v0.1.0-3-gabcdef (commit ..., go1.x)"
	fields := strings.Fields(string(out))
	if len(fields) < 2 || fields[0] != "lockstep" {
		return "", fmt.Errorf("read the version of %s: unexpected output %q", bin, out)
	}
	return fields[1], nil
}
