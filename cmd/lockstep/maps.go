package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"lockstep.dev/lockstep/bpfmaps"
)

func newMapsCmd() *cobra.Command {
	var root string
	cmd := &cobra.Command{
		Use:   "maps",
		Short: "Inspect the policy dataplane's pinned BPF maps (read-only)",
		Args:  cobra.NoArgs,
	}
	addBPFRootFlag(cmd, &root, true)
	cmd.AddCommand(newMapsListCmd(&root), newMapsDumpCmd(&root))
	return cmd
}

func newMapsListCmd(root *string) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the pinned maps with their sizes and entry counts",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			infos, err := bpfmaps.List(*root)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			switch output {
			case outputJSON, outputYAML:
				return writeStructured(out, output, infos)
			case outputTable:
				w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "NAME\tTYPE\tKEY\tVALUE\tMAX\tENTRIES")
				for _, m := range infos {
					entries := fmt.Sprint(m.Entries)
					if m.Entries < 0 {
						entries = "-"
					}
					fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%d\t%s\n", m.Name, m.Type, m.KeySize, m.ValueSize, m.MaxEntries, entries)
				}
				return w.Flush()
			}
			return checkOutput(output)
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}

func newMapsDumpCmd(root *string) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:       "dump NAME",
		Short:     "Print every entry of a pinned map, decoded",
		Example:   "  lockstep maps dump lockstep_ipcache -o json",
		Args:      cobra.ExactArgs(1),
		ValidArgs: bpfmaps.Names,
		RunE: func(cmd *cobra.Command, args []string) error {
			entries, err := bpfmaps.Dump(*root, args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			switch output {
			case outputJSON, outputYAML:
				return writeStructured(out, output, entries)
			case outputTable:
				w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "KEY\tVALUE")
				for _, e := range entries {
					k, err := json.Marshal(e.Key)
					if err != nil {
						return err
					}
					v, err := json.Marshal(e.Value)
					if err != nil {
						return err
					}
					fmt.Fprintf(w, "%s\t%s\n", k, v)
				}
				return w.Flush()
			}
			return checkOutput(output)
		},
	}
	addOutputFlag(cmd, &output)
	return cmd
}
