//go:build linux

package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"lockstep.dev/lockstep/internal/ociimage"
)

const usage = `usage:
  image lockstep [-bin bin/lockstep] [-name lockstep] [-tag dev] [-out bin/lockstep-image.tar]
  image binary -bin FILE -name NAME [-tag latest] [-path /FILE] [-link /PATH]... [-entrypoint ARGS] [-cmd ARGS] [-env K=V]... [-user U] [-out FILE]
  image pause [-bin FILE] [-name registry.k8s.io/pause] [-tag 3.10] [-out bin/pause-image.tar]

Each mode writes one image tarball for ctr images import, kind load image-archive or docker load.
Run "image MODE -h" for a mode's flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	modes := map[string]func([]string) error{
		"lockstep": runLockstep,
		"binary":   runBinary,
		"pause":    runPause,
	}
	run, ok := modes[os.Args[1]]
	if !ok {
		if h := os.Args[1]; h == "-h" || h == "-help" || h == "--help" || h == "help" {
			fmt.Print(usage)
			return
		}
		fmt.Fprintf(os.Stderr, "image: unknown mode %q\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err := run(os.Args[2:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

// progress prints what a mode is doing: collecting a few hundred files
// takes a moment.
func progress(format string, args ...any) {
	fmt.Printf("image: "+format+"\n", args...)
}

func runLockstep(args []string) error {
	flags := flag.NewFlagSet("image lockstep", flag.ContinueOnError)
	bin := flags.String("bin", "bin/lockstep", "the static lockstep binary (make build)")
	name := flags.String("name", "lockstep", "image name, without the tag (deploy/ runs lockstep:dev)")
	tag := flags.String("tag", "dev", "image tag")
	out := flags.String("out", "bin/lockstep-image.tar", "tarball to write")
	if err := flags.Parse(args); err != nil {
		return err
	}
	ref, err := reference(*name, *tag)
	if err != nil {
		return err
	}
	img, err := lockstepImage(ref, *bin, progress)
	if err != nil {
		return err
	}
	return writeAndReport(*out, img)
}

func runBinary(args []string) error {
	flags := flag.NewFlagSet("image binary", flag.ContinueOnError)
	bin := flags.String("bin", "", "the static binary to wrap (required)")
	name := flags.String("name", "", "image name, without the tag (required), e.g. e2e/agnhost")
	tag := flags.String("tag", "latest", "image tag")
	imagePath := flags.String("path", "", "the binary's path in the image (default /BASENAME)")
	entrypoint := flags.String("entrypoint", "", `entrypoint, as words or a JSON array (default the binary's path)`)
	cmd := flags.String("cmd", "", `default arguments, as words or a JSON array`)
	user := flags.String("user", "", "user to run as, uid[:gid] (default root)")
	var env, links stringList
	flags.Var(&env, "env", "environment variable K=V for the image (repeatable; PATH is set)")
	flags.Var(&links, "link", "a path in the image that is a symlink to the binary, e.g. /bin/sh for busybox (repeatable)")
	out := flags.String("out", "", "tarball to write (default bin/BASENAME-image.tar)")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *bin == "" || *name == "" {
		return errors.New("binary mode needs -bin and -name")
	}
	base := filepath.Base(*bin)
	if *imagePath == "" {
		*imagePath = "/" + base
	}
	if *out == "" {
		*out = filepath.Join("bin", base+"-image.tar")
	}
	ref, err := reference(*name, *tag)
	if err != nil {
		return err
	}
	cfg := ociimage.Config{User: *user, Env: env}
	if cfg.Entrypoint, err = parseArgs(*entrypoint); err != nil {
		return err
	}
	if cfg.Cmd, err = parseArgs(*cmd); err != nil {
		return err
	}
	img, err := binaryImage(ref, *bin, *imagePath, cfg)
	if err != nil {
		return err
	}
	for _, l := range links {
		if !path.IsAbs(l) || path.Clean(l) == path.Clean(*imagePath) {
			return fmt.Errorf("-link %q: want an absolute path other than the binary's", l)
		}
		img.Entries = append(img.Entries, ociimage.Symlink(path.Clean(l), *imagePath))
	}
	return writeAndReport(*out, img)
}

func runPause(args []string) error {
	flags := flag.NewFlagSet("image pause", flag.ContinueOnError)
	bin := flags.String("bin", "", "a static pause binary (default: build tools/image/pause)")
	name := flags.String("name", "registry.k8s.io/pause", "image name, without the tag")
	tag := flags.String("tag", "3.10", "image tag")
	out := flags.String("out", "bin/pause-image.tar", "tarball to write")
	if err := flags.Parse(args); err != nil {
		return err
	}
	ref, err := reference(*name, *tag)
	if err != nil {
		return err
	}
	if *bin == "" {
		dir, err := os.MkdirTemp("", "lockstep-pause-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		progress("building tools/image/pause")
		if *bin, err = buildPause(dir); err != nil {
			return err
		}
	}
	img, err := pauseImage(ref, *bin)
	if err != nil {
		return err
	}
	return writeAndReport(*out, img)
}

// reference joins a name and a tag, refusing a name that already has one
// so that -tag is never silently ignored.
func reference(name, tag string) (string, error) {
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		return "", fmt.Errorf("image name %q has a tag; give the name alone and the tag with -tag", name)
	}
	ref := name + ":" + tag
	if _, err := ociimage.ParseReference(ref); err != nil {
		return "", err
	}
	return ref, nil
}

// writeAndReport writes img to out (through a temporary file in the same
// directory, so a failed run leaves no half archive) and prints its names
// and digests.
func writeAndReport(out string, img ociimage.Image) error {
	created, err := sourceDateEpoch()
	if err != nil {
		return err
	}
	img.Created = created
	w, err := writeImage(out, img)
	if err != nil {
		return err
	}
	fi, err := os.Stat(out)
	if err != nil {
		return err
	}
	progress("wrote %s (%.1f MiB, %d entries in one layer)", out, float64(fi.Size())/(1<<20), w.Entries)
	progress("  name   %s (%s)", w.Reference, w.Reference.Familiar())
	progress("  digest %s", w.ManifestDigest)
	progress("  id     %s", w.ConfigDigest)
	progress("load it with: ctr -n k8s.io images import %s | kind load image-archive %s | docker load -i %s", out, out, out)
	return nil
}

// writeImage writes img to the file out.
func writeImage(out string, img ociimage.Image) (ociimage.Written, error) {
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return ociimage.Written{}, fmt.Errorf("create the directory of %s: %w", out, err)
	}
	f, err := os.CreateTemp(filepath.Dir(out), "."+filepath.Base(out)+".")
	if err != nil {
		return ociimage.Written{}, fmt.Errorf("write %s: %w", out, err)
	}
	defer os.Remove(f.Name())
	w, err := ociimage.Write(f, img)
	if err == nil {
		err = f.Chmod(0o644)
	}
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	if err == nil {
		err = os.Rename(f.Name(), out)
	}
	if err != nil {
		return ociimage.Written{}, fmt.Errorf("write %s: %w", out, err)
	}
	return w, nil
}

// sourceDateEpoch is the image's timestamp: SOURCE_DATE_EPOCH when set (the
// reproducible-builds convention), else the Unix epoch.
func sourceDateEpoch() (time.Time, error) {
	s := os.Getenv("SOURCE_DATE_EPOCH")
	if s == "" {
		return time.Unix(0, 0), nil
	}
	secs, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("read SOURCE_DATE_EPOCH=%q: %w (want seconds since 1970)", s, err)
	}
	return time.Unix(secs, 0), nil
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(s string) error {
	*l = append(*l, s)
	return nil
}
