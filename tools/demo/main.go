package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/internal/nodesim"
)

const nsPrefix = "lsdemo"

type pod struct {
	namespace, name string
	netns           ns.NetNS
	rt              *libcni.RuntimeConf
	v4, v6          netip.Addr
	hostIf          string
}

func main() {
	bin := flag.String("bin", "bin", "directory holding lockstep and the lockstep-cni symlink (make build)")
	pods := flag.Int("pods", 4, "number of pods to create")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, *bin, *pods); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, bin string, podCount int) (err error) {
	if os.Geteuid() != 0 {
		return errors.New("the demo creates network namespaces and veth pairs: run it as root (sudo make demo)")
	}
	if _, err := os.Stat(bin + "/lockstep-cni"); err != nil {
		return fmt.Errorf("find the plugin: %w (run make build first)", err)
	}
	if n, _ := nodesim.SweepStale(nsPrefix); n > 0 {
		fmt.Fprintf(out, "removed %d namespaces left by an interrupted demo\n", n)
	}
	work, err := os.MkdirTemp("", "lockstep-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)

	step(out, "starting a lockstep agent in a throwaway node namespace")
	node, err := nodesim.NewNode(nodesim.NodeOptions{
		Prefix: nsPrefix, BinDir: bin, WorkDir: work,
		Pools: []string{"10.244.0.0/24", "fd00:10:244::/120"},
	})
	if err != nil {
		return err
	}
	var created []*pod
	defer func() {
		// Runs on success, error and Ctrl-C alike.
		step(out, "tearing down")
		cleanup, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		for _, p := range created {
			_ = node.Del(cleanup, p.rt)
			_ = nodesim.Delete(p.netns)
		}
		if cerr := node.Close(); cerr != nil && err == nil {
			err = cerr
		}
		fmt.Fprintln(out, "  all pods, links, namespaces and the agent are gone")
	}()
	if err := node.StartAgent(ctx); err != nil {
		return err
	}
	fmt.Fprintf(out, "  node netns %s, pools 10.244.0.0/24 and fd00:10:244::/120\n", node.NS.Path())

	step(out, "creating %d pods through CNI ADD (libcni -> bin/lockstep-cni -> agent)", podCount)
	names := []string{"web-0", "web-1", "db-0", "cache-0", "api-0", "api-1", "worker-0", "worker-1"}
	for i := range podCount {
		if err := ctx.Err(); err != nil {
			return err
		}
		p := &pod{namespace: "demo", name: fmt.Sprintf("pod-%d", i)}
		if i < len(names) {
			p.name = names[i]
		}
		if p.netns, err = nodesim.Create(nodesim.Name(nsPrefix)); err != nil {
			return err
		}
		created = append(created, p)
		p.rt = nodesim.Runtime("demo-"+p.name, p.netns, "eth0", p.namespace, p.name)
		start := time.Now()
		raw, err := node.Add(ctx, p.rt)
		if err != nil {
			return fmt.Errorf("ADD %s: %w", p.name, err)
		}
		took := time.Since(start)
		res, err := types100.GetResult(raw)
		if err != nil {
			return err
		}
		for _, ip := range res.IPs {
			a, _ := netip.AddrFromSlice(ip.Address.IP)
			if a = a.Unmap(); a.Is4() {
				p.v4 = a
			} else {
				p.v6 = a
			}
		}
		p.hostIf = api.HostIfName(p.rt.ContainerID, "eth0")
		fmt.Fprintf(out, "  %-10s %-14s %-22s host veth %s  (ADD %s)\n", p.name, p.v4, p.v6, p.hostIf, took.Round(100*time.Microsecond))
	}

	step(out, "CHECK and STATUS")
	for _, p := range created {
		if err := node.Check(ctx, p.rt); err != nil {
			return fmt.Errorf("CHECK %s: %w", p.name, err)
		}
	}
	if err := node.Status(ctx); err != nil {
		return fmt.Errorf("STATUS: %w", err)
	}
	fmt.Fprintf(out, "  every pod's interface, addresses and routes match the agent's record; plugin ready\n")

	step(out, "ping matrix (IPv4 / IPv6), rows ping columns")
	if err := pingMatrix(ctx, out, node, created); err != nil {
		return err
	}
	return ctx.Err()
}

func pingMatrix(ctx context.Context, out io.Writer, node *nodesim.Node, pods []*pod) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	header := []string{"from \\ to"}
	for _, p := range pods {
		header = append(header, p.name)
	}
	fmt.Fprintln(tw, "  "+strings.Join(header, "\t"))
	type src struct {
		name  string
		netns ns.NetNS
	}
	sources := []src{{"node", node.NS}}
	for _, p := range pods {
		sources = append(sources, src{p.name, p.netns})
	}
	failed := 0
	for _, s := range sources {
		row := []string{s.name}
		for _, dst := range pods {
			if err := ctx.Err(); err != nil {
				return err
			}
			if s.name == dst.name {
				row = append(row, "-")
				continue
			}
			cell := ""
			for _, a := range []netip.Addr{dst.v4, dst.v6} {
				if err := nodesim.Ping(s.netns, a, time.Second); err != nil {
					cell += "✗"
					failed++
				} else {
					cell += "✓"
				}
			}
			row = append(row, cell[:len(cell)/2]+" "+cell[len(cell)/2:])
		}
		fmt.Fprintln(tw, "  "+strings.Join(row, "\t"))
	}
	tw.Flush()
	if failed > 0 {
		return fmt.Errorf("%d pings failed", failed)
	}
	fmt.Fprintln(out, "  every pod reaches every other pod and the node, over IPv4 and IPv6")
	return nil
}

func step(out io.Writer, format string, args ...any) {
	fmt.Fprintf(out, "\n==> "+format+"\n", args...)
}
