package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"lockstep.dev/lockstep/agent"
	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/cni/install"
	"lockstep.dev/lockstep/internal/yamljson"
)

// The flags several subcommands share are registered here, once each, so a
// flag name has one shorthand, one default and one help text wherever it
// appears (TestFlagsAgree walks the command tree to keep it so). A flag's
// help says what the value is; what a subcommand does with it belongs in
// the subcommand's Long text.

// Output formats of every --output flag: a person's first, then the two
// for machines, with the same field names.
const (
	outputTable = "table"
	outputJSON  = "json"
	outputYAML  = "yaml"
)

// addOutputFlag registers --output/-o.
func addOutputFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVarP(p, "output", "o", outputTable, "output format: table, json or yaml")
}

// checkOutput is the one answer to a bad --output. The root command's
// PersistentPreRunE calls it for every subcommand with an --output flag.
func checkOutput(o string) error {
	switch o {
	case outputTable, outputJSON, outputYAML:
		return nil
	}
	return fmt.Errorf("parse --output %q: want table, json or yaml", o)
}

// writeStructured writes v as indented JSON or as YAML. The YAML is the
// JSON converted, so both have the same field names (the json tags).
func writeStructured(w io.Writer, output string, v any) error {
	switch output {
	case outputJSON:
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case outputYAML:
		b, err := yamljson.Marshal(v)
		if err != nil {
			return fmt.Errorf("write yaml: %w", err)
		}
		_, err = w.Write(b)
		return err
	}
	return checkOutput(output)
}

// writeStreamed writes one value of a stream: a JSON object on one line,
// or a YAML document that starts with "---".
func writeStreamed(w io.Writer, output string, v any) error {
	switch output {
	case outputJSON:
		return json.NewEncoder(w).Encode(v)
	case outputYAML:
		if _, err := io.WriteString(w, "---\n"); err != nil {
			return err
		}
	}
	return writeStructured(w, output, v)
}

// defaultBPFRoot is the agent's pin root (agent/datapath.DefaultPinRoot,
// repeated in package agent so the CLI does not link the dataplane loader).
const defaultBPFRoot = agent.DefaultBPFRoot

// addBPFRootFlag registers --bpf-root on flags (a command's own or its
// persistent ones).
func addBPFRootFlag(cmd *cobra.Command, p *string, persistent bool) {
	f := cmd.Flags()
	if persistent {
		f = cmd.PersistentFlags()
	}
	f.StringVar(p, "bpf-root", defaultBPFRoot, "bpffs directory the agent pins its BPF maps under")
}

// addSocketFlag registers --socket, the agent's API socket.
func addSocketFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVar(p, "socket", api.DefaultSocket, "unix socket of the agent's API (the CNI plugin and the CLI call it)")
}

// addStateDirFlag registers --state-dir.
func addStateDirFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVar(p, "state-dir", agent.DefaultStateDir, "directory of the agent's durable state file")
}

// addManifestsFlag registers --manifests.
func addManifestsFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVar(p, "manifests", "", "directory of Namespace, Pod, NetworkPolicy, Service and EndpointSlice YAML")
}

// addDataplaneFlag registers --dataplane.
func addDataplaneFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVar(p, "dataplane", agent.DataplaneEBPF, "policy dataplane: ebpf, iptables (legacy or nft, detected) or hns (Windows)")
}

// addPoolCIDRFlag registers --pool-cidr with the subcommand's default.
func addPoolCIDRFlag(cmd *cobra.Command, p *[]string, def []string) {
	cmd.Flags().StringSliceVar(p, "pool-cidr", def, "address pool of the node's pods; repeatable, one per pool (e.g. an IPv6 one, fd00:10:244::/120)")
}

// addFamilyFlag registers --family with the subcommand's default.
func addFamilyFlag(cmd *cobra.Command, p *string, def string) {
	cmd.Flags().StringVar(p, "family", def, "IP family, IPv4 or IPv6: probe's to connect over (its pods get an address of each family the pools have), explain's pod addresses that ipBlocks match")
}

// addKubeconfigFlag registers --kubeconfig.
func addKubeconfigFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVar(p, "kubeconfig", "", "kubeconfig file to reach the API server (default: in-cluster config)")
}

// addMetricsAddrFlag registers --metrics-addr with the component's default.
func addMetricsAddrFlag(cmd *cobra.Command, p *string, def string) {
	cmd.Flags().StringVar(p, "metrics-addr", def, `address of /healthz (liveness), /readyz (readiness) and /metrics; ":PORT" listens on every address, empty disables`)
}

// addLogFlags registers --log-level and --log-format (see newLogger).
func addLogFlags(cmd *cobra.Command, level, format *string) {
	cmd.Flags().StringVar(level, "log-level", "info", "debug, info, warn or error")
	cmd.Flags().StringVar(format, "log-format", "text", "text or json")
}

// addCNIDirFlags registers --cni-bin-dir, --cni-conf-dir and
// --cni-conf-name, where install-cni writes and uninstall removes.
func addCNIDirFlags(cmd *cobra.Command, o *install.Options) {
	f := cmd.Flags()
	f.StringVar(&o.BinDir, "cni-bin-dir", install.DefaultBinDir, "CNI plugin directory (the lockstep binary and the lockstep-cni symlink)")
	f.StringVar(&o.ConfDir, "cni-conf-dir", install.DefaultConfDir, "CNI network config directory")
	f.StringVar(&o.ConfName, "cni-conf-name", install.DefaultConfName, "file name of lockstep's CNI config list")
}

// deprecatedAlias returns a hidden copy of flag under an old name that
// sets the same value and warns "use --NEW" when used, so scripts and
// manifests written for the old name keep working.
func deprecatedAlias(flag *pflag.Flag, old string) *pflag.Flag {
	alias := *flag
	alias.Name, alias.Shorthand = old, ""
	alias.Deprecated = "use --" + flag.Name
	alias.Hidden = true
	return &alias
}
