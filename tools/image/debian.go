//go:build linux

package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strings"
)

// multiarch is the Debian multiarch directory name of each architecture
// lockstep images can be built for (dpkg-architecture's DEB_HOST_MULTIARCH).
var multiarch = map[string]string{
	"amd64":   "x86_64-linux-gnu",
	"arm64":   "aarch64-linux-gnu",
	"386":     "i386-linux-gnu",
	"arm":     "arm-linux-gnueabihf",
	"ppc64le": "powerpc64le-linux-gnu",
	"riscv64": "riscv64-linux-gnu",
	"s390x":   "s390x-linux-gnu",
}

// libDirs returns the directories the dynamic loader of a Debian system of
// architecture arch searches, in its order (ld.so.conf's multiarch
// directories, then the defaults).
func libDirs(arch string) ([]string, error) {
	triplet, ok := multiarch[arch]
	if !ok {
		return nil, fmt.Errorf("no Debian multiarch directory known for %s", arch)
	}
	return []string{"/lib/" + triplet, "/usr/lib/" + triplet, "/lib64", "/usr/lib64", "/lib", "/usr/lib"}, nil
}

// packageFiles returns the paths dpkg lists for an installed package.
func packageFiles(pkg string) ([]string, error) {
	out, err := exec.Command("dpkg-query", "-L", pkg).Output()
	if err != nil {
		return nil, fmt.Errorf("list the files of package %s: %w (install it: make deps)", pkg, exitDetail(err))
	}
	var files []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "/") {
			files = append(files, line)
		}
	}
	return files, nil
}

// packageVersions returns "package=version" for every Debian package that
// owns one of files, sorted, so the image's labels say exactly what went
// in. A file no package owns is an error: the image is built from packages
// on purpose, to be rebuilt from the same versions.
func packageVersions(files []string) ([]string, error) {
	owners := map[string][]string{} // path as dpkg knows it -> packages
	args := []string{"-S"}
	for _, f := range files {
		args = append(args, f)
		if twin, ok := mergedUsrTwin(f); ok {
			args = append(args, twin)
		}
	}
	// dpkg-query -S exits 1 when some pattern matches nothing; the twins
	// usually do, so its stdout is read whatever the status.
	out, err := exec.Command("dpkg-query", args...).Output()
	if err != nil && len(out) == 0 {
		return nil, fmt.Errorf("find the packages of %d files: %w", len(files), exitDetail(err))
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		pkgs, path, ok := strings.Cut(sc.Text(), ": ")
		if !ok || strings.HasPrefix(pkgs, "diversion ") {
			continue
		}
		owners[path] = strings.Split(pkgs, ", ")
	}
	seen := map[string]bool{}
	var pkgs, orphans []string
	for _, f := range files {
		found := owners[f]
		if twin, ok := mergedUsrTwin(f); ok && len(found) == 0 {
			found = owners[twin]
		}
		if len(found) == 0 {
			orphans = append(orphans, f)
		}
		for _, p := range found {
			if !seen[p] {
				seen[p] = true
				pkgs = append(pkgs, p)
			}
		}
	}
	if len(orphans) > 0 {
		return nil, fmt.Errorf("no Debian package owns %v; the image copies packaged files only", orphans)
	}
	sort.Strings(pkgs)
	out, err = exec.Command("dpkg-query", append([]string{"-W", "-f", "${Package}=${Version}\n"}, pkgs...)...).Output()
	if err != nil {
		return nil, fmt.Errorf("read the versions of %v: %w", pkgs, exitDetail(err))
	}
	versions := strings.Fields(string(out))
	sort.Strings(versions)
	return versions, nil
}

// mergedUsrTwin returns the other spelling of a path on a merged-/usr
// system (/usr/lib/x and /lib/x): dpkg records each file under the path its
// package ships, which is often not the one the loader resolves to.
func mergedUsrTwin(p string) (string, bool) {
	for _, dir := range []string{"/bin/", "/sbin/", "/lib/", "/lib32/", "/lib64/", "/libx32/"} {
		if rest, ok := strings.CutPrefix(p, "/usr"+dir); ok {
			return dir + rest, true
		}
		if rest, ok := strings.CutPrefix(p, dir); ok {
			return "/usr" + dir + rest, true
		}
	}
	return "", false
}

// debianVersion returns /etc/debian_version, e.g. "12.11".
func debianVersion() (string, error) {
	b, err := os.ReadFile("/etc/debian_version")
	if err != nil {
		return "", fmt.Errorf("read the Debian version: %w (lockstep images are built on Debian)", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// exitDetail adds a failed command's standard error to its error.
func exitDetail(err error) error {
	var exit *exec.ExitError
	if errors.As(err, &exit) && len(exit.Stderr) > 0 {
		return fmt.Errorf("%w: %s", err, bytes.TrimSpace(exit.Stderr))
	}
	return err
}
