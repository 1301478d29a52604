//go:build linux

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"lockstep.dev/lockstep/test/kubetest"
	"lockstep.dev/lockstep/test/realnode"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	var err error
	switch os.Args[1] {
	case "init":
		err = runInit(os.Args[2:])
	case "up":
		err = up(ctx, os.Args[2:])
	case "down":
		err = down(os.Args[2:])
	case "status":
		err = status(ctx, os.Args[2:])
	case "exec":
		err = execOn(ctx, os.Args[2:])
	case "netpol":
		err = netpol(ctx, os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage: e2e up [--name NAME] [--nodes N] [--dir DIR] [--dataplane ebpf|iptables] [--no-lockstep] [--image FILE]...
       e2e down [--name NAME] [--dir DIR]
       e2e status [--name NAME] [--dir DIR]
       e2e exec [--name NAME] [--dir DIR] NODE -- COMMAND...
       e2e netpol [--name NAME] [--dir DIR] [--dataplanes ebpf,iptables] [--focus REGEXP]... [--out FILE] [--reports DIR] [--keep]`)
	os.Exit(2)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func runInit(args []string) error {
	fs := flag.NewFlagSet("init", flag.ExitOnError)
	spec := fs.String("spec", "", "the host's init spec (JSON)")
	_ = fs.Parse(args)
	if os.Getpid() != 1 {
		return errors.New("init must run as PID 1 of a new PID namespace (the harness starts it)")
	}
	return realnode.RunInit(*spec)
}

func up(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("up", flag.ExitOnError)
	name := fs.String("name", realnode.NameFromEnv(), "cluster name ($"+realnode.NameEnv+"): one cluster per name runs on a machine")
	dir := fs.String("dir", "", "cluster directory (default: one per name in the temporary directory)")
	nodes := fs.Int("nodes", 2, "number of nodes")
	dataplane := fs.String("dataplane", "ebpf", "lockstep's dataplane: ebpf or iptables")
	noLockstep := fs.Bool("no-lockstep", false, "bring up the cluster without installing lockstep")
	var extra repeatedFlag
	fs.Var(&extra, "image", "an image archive to import into every node as well (repeatable)")
	_ = fs.Parse(args)

	t0 := time.Now()
	repo, err := realnode.RepoRoot()
	if err != nil {
		return err
	}
	kubeBin, err := kubetest.BinDir(ctx, logf)
	if err != nil {
		return err
	}
	c, err := bringUp(ctx, repo, kubeBin, upOptions{name: *name, dir: *dir, nodes: *nodes, extra: extra})
	if err != nil {
		return err
	}
	if !*noLockstep {
		if err := c.InstallLockstep(ctx, repo, *dataplane); err != nil {
			return fmt.Errorf("%w\n(the cluster is still up: make e2e-down removes it)", err)
		}
	}
	logf("cluster up in %s", time.Since(t0).Round(time.Second))
	fmt.Printf("export KUBECONFIG=%s\n", c.Kubeconfig)
	fmt.Printf("# kubectl is %s; on a node: go run ./tools/e2e exec %s -- crictl ps\n", c.KubectlPath, c.Nodes[0].Name)
	return nil
}

// upOptions are what bringUp needs besides the repository and the
// Kubernetes binaries.
type upOptions struct {
	name, dir string
	nodes     int
	extra     []string // image archives to import as well
}

// bringUp builds the images and brings up a cluster, without lockstep.
func bringUp(ctx context.Context, repo, kubeBin string, o upOptions) (*realnode.Cluster, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own binary: %w", err)
	}
	images, err := realnode.BuildImages(ctx, realnode.ImageOptions{Repo: repo, KubeBinDir: kubeBin, Logf: logf})
	if err != nil {
		return nil, err
	}
	return realnode.Up(ctx, realnode.Options{
		Name: o.name, Dir: o.dir, Nodes: o.nodes, KubeBinDir: kubeBin, InitBinary: self, Images: append(images, o.extra...), Logf: logf,
	})
}

// repeatedFlag collects a flag given several times (--image, --focus).
type repeatedFlag []string

func (l *repeatedFlag) String() string     { return fmt.Sprint(*l) }
func (l *repeatedFlag) Set(v string) error { *l = append(*l, v); return nil }

func down(args []string) error {
	fs := flag.NewFlagSet("down", flag.ExitOnError)
	name := fs.String("name", realnode.NameFromEnv(), "cluster name ($"+realnode.NameEnv+")")
	dir := fs.String("dir", "", "cluster directory (default: the name's)")
	_ = fs.Parse(args)
	t0 := time.Now()
	if err := realnode.Down(*name, *dir, logf); err != nil {
		return err
	}
	logf("cluster down in %s: nothing of it is left", time.Since(t0).Round(time.Second))
	return nil
}

func status(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("status", flag.ExitOnError)
	name := fs.String("name", realnode.NameFromEnv(), "cluster name ($"+realnode.NameEnv+")")
	dir := fs.String("dir", "", "cluster directory (default: the name's)")
	_ = fs.Parse(args)
	c, err := realnode.Open(*name, *dir, logf)
	if err != nil {
		return err
	}
	out, err := c.Kubectl(ctx, "get", "nodes,pods", "-A", "-o", "wide")
	os.Stdout.Write(out)
	return err
}

func execOn(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("exec", flag.ExitOnError)
	name := fs.String("name", realnode.NameFromEnv(), "cluster name ($"+realnode.NameEnv+")")
	dir := fs.String("dir", "", "cluster directory (default: the name's)")
	_ = fs.Parse(args)
	rest := fs.Args()
	if len(rest) < 2 {
		usage()
	}
	c, err := realnode.Open(*name, *dir, logf)
	if err != nil {
		return err
	}
	h, err := c.Node(rest[0])
	if err != nil {
		return err
	}
	cmd := rest[1:]
	if cmd[0] == "--" {
		cmd = cmd[1:]
	}
	out, err := c.Exec(ctx, h, cmd...)
	os.Stdout.Write(out)
	return err
}
