//go:build linux

// Command demo is `make demo`: lockstep's main job on one machine, no
// cluster needed. It starts a standalone agent in a throwaway node network
// namespace enforcing the manifests of examples/demo, creates every pod
// through the real CNI plugin, and prints the truth table real packets
// give. Then it edits one policy (the version in examples/demo-edit), waits
// for the agent to follow the edit, and prints the new table and the cells
// that changed. Everything is removed at the end, also on Ctrl-C.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"lockstep.dev/lockstep/probe"
)

func main() {
	bin := flag.String("bin", "bin", "directory holding lockstep and the lockstep-cni symlink (make build)")
	examples := flag.String("examples", "examples", "directory holding demo/ and demo-edit/")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout, *bin, *examples); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, out io.Writer, bin, examples string) error {
	if os.Geteuid() != 0 {
		return errors.New("the demo creates network namespaces and veth pairs: run it as root (sudo make demo)")
	}
	self, err := filepath.Abs(filepath.Join(bin, "lockstep"))
	if err != nil {
		return err
	}
	if _, err := os.Stat(self); err != nil {
		return fmt.Errorf("find the binary: %w (run make build first)", err)
	}
	// The agent follows a directory of our own, so the edit below does not
	// touch examples/.
	work, err := os.MkdirTemp("", "lockstep-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if err := copyManifests(filepath.Join(examples, "demo"), work); err != nil {
		return err
	}
	pods, _, err := probe.LoadPods(work)
	if err != nil {
		return err
	}

	fmt.Fprintf(out, "lockstep demo: %d pods from %s, policies enforced by the eBPF dataplane\n\n", len(pods), filepath.Join(examples, "demo"))
	_, err = probe.Run(ctx, probe.Config{
		Binary: self, Manifests: work, Pods: pods, Progress: os.Stderr,
		Then: func(ctx context.Context, first *probe.Report, reprobe func(context.Context) (*probe.Report, error)) error {
			before := first.Table()
			fmt.Fprintf(out, "Truth table ('.' allowed, 'X' denied, rows are sources):\n\n%s\n", before)

			edit := filepath.Join(examples, "demo-edit")
			fmt.Fprintf(out, "Editing the policies: the manifests now match %s\n\n", edit)
			if err := copyManifests(edit, work); err != nil {
				return err
			}
			// The agent follows the directory; probe until the table
			// changes, and say how long the edit took to be in force.
			start := time.Now()
			for {
				rep, err := reprobe(ctx)
				if err != nil {
					return err
				}
				after := rep.Table()
				if diff := probe.CompareTables(before, after); len(diff) > 0 {
					fmt.Fprintf(out, "New truth table, in force within %s of the edit:\n\n%s\n", time.Since(start).Round(10*time.Millisecond), after)
					fmt.Fprintln(out, "Cells that changed:")
					for _, m := range diff {
						fmt.Fprintf(out, "  %s %s -> %s: %c before, %c now\n", m.Port, m.From, m.To, m.Expected, m.Actual)
					}
					return nil
				}
				if time.Since(start) > 15*time.Second {
					return errors.New("the agent did not apply the edited policies within 15s")
				}
			}
		},
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "\nEverything the demo created is gone. Try your own policies: bin/lockstep probe --manifests DIR")
	return nil
}

// copyManifests copies the YAML files of src into dst, replacing files of
// the same name, each through a rename so the agent never reads half a
// file.
func copyManifests(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("read %s: %w", src, err)
	}
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ".yaml" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			return err
		}
		tmp := filepath.Join(dst, "."+e.Name()+".tmp")
		if err := os.WriteFile(tmp, b, 0o644); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(dst, e.Name())); err != nil {
			return err
		}
	}
	return nil
}
