//go:build linux

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	mfs "lockstep.dev/lockstep/agent/manifests"
	"lockstep.dev/lockstep/probe"
)

func newProbeCmd() *cobra.Command {
	var (
		manifests string
		output    string
		expect    string
		explainIt bool
		cfg       probe.Config
	)
	cmd := &cobra.Command{
		Use:   "probe --manifests DIR",
		Short: "Test NetworkPolicy with real packets on a throwaway local node",
		Long: `Create a throwaway node network namespace with a real lockstep agent
enforcing the Namespaces, Pods, NetworkPolicies and Services in
--manifests, create every pod through the real CNI plugin, listen in each
pod on every port it declares, and try a connection for every ordered pair
of pods and every port of the destination: TCP connects, UDP sends a nonce
and waits for its echo. Each listener answers with its pod's name.

Output is one reachability table per port, as the upstream Kubernetes e2e
tests print them ('.' allowed, 'X' denied, '?' could not be probed, '-'
self), or with -o json or -o yaml every result. Progress goes to stderr.

--via service (the default, with pod-ip, when the manifests declare
Services) also connects from every pod to every ClusterIP (of --family) and
port of every Service, up to --attempts times: each new connection reaches
the backend the dataplane picks, and policy is judged on that backend. One
table per Service port follows, headed svc:PORT/PROTOCOL, a column per
Service: '.' every attempt answered, 'X' none (dropped), '~' some (the
Service has backends this pod may reach and others it may not), 'R' every
attempt refused at once (no ready endpoint), '?' could not be probed.

Every result is also judged by lockstep explain on the same manifests (with
the addresses the pods got), by pod address and, through a Service, at the
ClusterIP probed, on each of its ready backends: -o json always carries
its verdict ("explained": allow or deny by pod address, the outcome
expected through a Service) and "reason"; --explain prints one line per
cell after the tables, with the reason, and marks a cell where explain and
the packets disagree (a bug worth reporting).

--expect FILE compares the tables with FILE, in the format probe prints
(hand-written, or a previous run's output) or a previous run's -o json.
FILE is read before anything is created; a malformed one is an error. The
probe then prints the cells that differ (from, to, port, expected, got) and
exits 1, or says "matches FILE" and exits 0: a pull request that changes a
policy can carry the table it should give. A cell that could not be probed
('?') matches anything.

The pod annotation lockstep.dev/ip pins a pod's address, which must fall
inside one of the --pool-cidr pools (with --family IPv6 and no IPv6 pool,
` + probe.DefaultPool6 + ` is added). Runs as root; the
machine's own interfaces, routes and firewall are never touched, and
everything the probe creates is removed when it ends, also on Ctrl-C.`,
		Example: "  sudo lockstep probe --manifests examples/demo --explain\n  sudo lockstep probe --manifests examples/demo --expect expected.txt\n  sudo lockstep probe --manifests DIR -o json --connect-timeout 500ms\n  sudo lockstep probe --manifests DIR --via service --family IPv6",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch cfg.Via {
			case "", probe.ViaPodIP, probe.ViaService, probe.ViaBoth:
			default:
				return fmt.Errorf("parse --via %q: want %s, %s or %s", cfg.Via, probe.ViaPodIP, probe.ViaService, probe.ViaBoth)
			}
			if manifests == "" {
				return errors.New("no --manifests given: name a directory of Namespace, Pod and NetworkPolicy YAML")
			}
			var expected *probe.Table
			if expect != "" {
				t, err := readExpected(expect)
				if err != nil {
					return err
				}
				expected = &t
			}
			if os.Geteuid() != 0 {
				return errors.New("probe creates network namespaces and veth pairs: run it as root (sudo lockstep probe ...)")
			}
			self, err := os.Executable()
			if err != nil {
				return fmt.Errorf("find own binary: %w", err)
			}
			pods, skipped, err := probe.LoadPods(manifests)
			if err != nil {
				return err
			}
			if len(skipped) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "skipping hostNetwork pods %s: NetworkPolicy does not apply to them\n", strings.Join(skipped, ", "))
			}
			svcs, skipped, err := probe.LoadServices(manifests)
			if err != nil {
				return err
			}
			if len(skipped) > 0 && cfg.Via != probe.ViaPodIP {
				fmt.Fprintf(cmd.ErrOrStderr(), "skipping Services %s: headless or ExternalName (no ClusterIP to connect to), or labelled for another proxy\n", strings.Join(skipped, ", "))
			}
			cfg.Binary, cfg.Manifests, cfg.Pods, cfg.Services = self, manifests, pods, svcs
			cfg.Progress = cmd.ErrOrStderr()

			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGINT, syscall.SIGTERM)
			defer stop()
			rep, err := probe.Run(ctx, cfg)
			if err != nil {
				return fmt.Errorf("probe: %w", err)
			}
			objs, err := mfs.Load(manifests)
			if err != nil {
				return fmt.Errorf("explain the results: %w", err)
			}
			if err := rep.Explain(probe.SnapshotOf(objs, rep)); err != nil {
				return fmt.Errorf("explain the results: %w", err)
			}
			if err := writeReport(cmd.OutOrStdout(), rep, output); err != nil {
				return err
			}
			if explainIt && output == "table" {
				writeReasons(cmd.OutOrStdout(), rep)
			}
			if expected != nil {
				return checkExpected(cmd.ErrOrStderr(), expect, *expected, rep.Table())
			}
			return nil
		},
	}
	f := cmd.Flags()
	addManifestsFlag(cmd, &manifests)
	addOutputFlag(cmd, &output)
	addDataplaneFlag(cmd, &cfg.Dataplane)
	addPoolCIDRFlag(cmd, &cfg.Pools, []string{probe.DefaultPool})
	f.StringVar(&expect, "expect", "", "compare the tables with this file (a table as probe prints it, or its -o json); differing cells exit 1")
	f.BoolVar(&explainIt, "explain", false, "after the tables, print every cell with the reason lockstep explain gives (-o json always has it)")
	addFamilyFlag(cmd, &cfg.Family, probe.IPv4)
	f.DurationVar(&cfg.Timeout, "connect-timeout", probe.DefaultTimeout, "how long one connection attempt may take before it counts as denied")
	// --timeout was --connect-timeout's name before status's --timeout
	// (how long to wait for the agent) gave the name its one meaning.
	f.AddFlag(deprecatedAlias(f.Lookup("connect-timeout"), "timeout"))
	f.IntVar(&cfg.Workers, "workers", probe.DefaultWorkers, "connection attempts in flight at once")
	f.StringVar(&cfg.Via, "via", "", "how to reach the pods: pod-ip, service (every frontend of every Service) or both (default: both when the manifests declare Services, else pod-ip)")
	f.IntVar(&cfg.Attempts, "attempts", probe.DefaultAttempts, "connections a probe through a Service makes at most, each reaching a backend the dataplane picks")
	return cmd
}

func writeReport(w io.Writer, rep *probe.Report, output string) error {
	if output != outputTable {
		return writeStructured(w, output, rep)
	}
	_, err := io.WriteString(w, rep.Table().String())
	return err
}
