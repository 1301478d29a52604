package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/cilium/ebpf/ringbuf"
	"github.com/spf13/cobra"

	"lockstep.dev/lockstep/bpfmaps"
)

func newMonitorCmd() *cobra.Command {
	var root, output string
	cmd := &cobra.Command{
		Use:   "monitor",
		Short: "Stream policy verdicts (drops and newly allowed connections) until Ctrl-C",
		Long: `Stream the dataplane's verdict events, one line each: every dropped packet
and every connection policy allowed (reason allowed-new), or that the node
itself opened to a pod whose ingress is isolated (allowed-node: a pod never
blocks its own node), and every connection to a Service without a ready
backend that the dataplane refused (REJECT service-no-backend: a TCP reset or
an ICMP port unreachable went back to the pod). A connection through a
Service shows its backend, which policy judged. Events are only produced
while a monitor runs; run one at a time (the first to exit turns events off).

With -o json each event is one JSON object on a line; with -o yaml, one
YAML document.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rd, err := bpfmaps.OpenEvents(root)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			done := make(chan struct{})
			defer close(done)
			go func() {
				select {
				case <-ctx.Done():
					rd.Close() // unblocks Read
				case <-done:
				}
			}()
			defer rd.Close()
			out := cmd.OutOrStdout()
			for {
				ev, err := rd.Read()
				if errors.Is(err, ringbuf.ErrClosed) {
					return nil
				}
				if err != nil {
					return fmt.Errorf("read event: %w", err)
				}
				if output != outputTable {
					if err := writeStreamed(out, output, ev); err != nil {
						return err
					}
					continue
				}
				writeEvent(out, ev)
			}
		},
	}
	addBPFRootFlag(cmd, &root, false)
	addOutputFlag(cmd, &output)
	return cmd
}

func writeEvent(w io.Writer, ev bpfmaps.Event) {
	verdict := "ALLOW"
	switch ev.Verdict {
	case bpfmaps.VerdictDrop:
		verdict = "DROP"
	case bpfmaps.VerdictReject:
		verdict = "REJECT"
	}
	fmt.Fprintf(w, "%-6s %-18s if=%d %-7s %-6s %s:%d -> %s:%d peer=%d\n",
		verdict, ev.Reason, ev.Ifindex, bpfmaps.DirString(ev.Dir), bpfmaps.ProtoString(ev.Proto),
		ev.Saddr, ev.Sport, ev.Daddr, ev.Dport, ev.Peer)
}
