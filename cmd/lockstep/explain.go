package main

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/endpoints"
	"lockstep.dev/lockstep/agent/explain"
	"lockstep.dev/lockstep/agent/manifests"
	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/probe"
)

func newExplainCmd() *cobra.Command {
	var (
		from, to, port      string
		dir, socket, output string
		family              string
		timeout             time.Duration
	)
	cmd := &cobra.Command{
		Use:   "explain --from NS/POD|CIDR --to NS/POD|svc/NS/NAME|CIDR --port PORT[/PROTO]",
		Short: "Say which NetworkPolicy rule allows a connection, or that none does",
		Long: `Explain one connection by name, from the committed state: for the source's
egress and the destination's ingress, whether that pod is isolated, which
NetworkPolicies select it, and which rule allows the connection (policy,
direction and rule index, e.g. "default/allow-web ingress[1]") or that none
does ("default deny"). A side is allowed when its pod is not isolated; an
address outside the cluster (--from or --to as an address or a CIDR) has
no policy of its own. The connection is allowed when both sides are.

--port is PORT or PORT/PROTO, PROTO tcp (the default), udp or sctp. A named
port in a policy resolves on the destination pod's containers. An address
that belongs to a pod is that pod. ipBlocks match the pods' addresses of
--family, IPv4 or IPv6 (default: the family of the address given, else
each pod's first address).

--to may be a Service: its ClusterIP, or svc/NAMESPACE/NAME (its ClusterIP
of --family, else of --from's address, else its first), with --port a
Service port. Policy judges the pod that receives the connection, after
translation, so explain translates as the dataplanes do (the Service port
to each ready endpoint of its EndpointSlices, at the port the targetPort
resolved to on that pod) and judges the connection to each backend. The
verdict is ALLOW (every backend allows), DENY (none does), PARTIAL (some
do: a new connection's fate depends on the backend it lands on) or
REFUSED (no ready backend: refused before any policy), as lockstep probe
--via service shows '.', 'X', '~' and 'R'; DENY without backends when the
Service's internalTrafficPolicy is Local and the client's node has no
endpoint while others do (dropped, as kube-proxy drops it).

On a node it asks the agent on --socket, which judges one read of its
store. With --manifests DIR it judges that directory as the standalone
agent and lockstep probe load it, needs neither root nor an agent, and
takes the pods' addresses from their lockstep.dev/ip annotation or status
(a pod without one matches no ipBlock and is no Service's endpoint).

-o table (default), json or yaml (the same fields). The exit status is 0
whatever the verdict; it is 1 when the question cannot be answered.`,
		Example: `  lockstep explain --manifests examples/policy --from demo/client --to demo/web --port 80
  lockstep explain --from default/frontend --to 203.0.113.7 --port 443/tcp -o json
  sudo lockstep explain --from 10.244.0.12 --to kube-system/coredns-abc --port 53/udp
  sudo lockstep explain --from default/frontend --to svc/kube-system/kube-dns --port 53/udp
  sudo lockstep explain --from default/frontend --to 10.96.0.10 --port 53/udp -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if from == "" || to == "" || port == "" {
				return errors.New("explain needs --from, --to and --port, e.g. --from default/client --to default/web --port 80/tcp")
			}
			fam, err := familyNumber(family)
			if err != nil {
				return err
			}
			q, err := explain.ParseQuery(from, to, port, fam)
			if err != nil {
				return err
			}
			var res *explain.Result
			if dir != "" {
				snap, err := manifestSnapshot(dir)
				if err != nil {
					return err
				}
				if res, err = explain.Explain(snap, q); err != nil {
					return err
				}
			} else {
				c := api.NewClient(socket, timeout)
				defer c.Close()
				res = &explain.Result{}
				if err := c.Explain(cmd.Context(), api.ExplainRequest{From: from, To: to, Port: port, Family: fam}, res); err != nil {
					return fmt.Errorf("ask the agent on %s to explain: %w (without an agent, use --manifests DIR)", socket, err)
				}
			}
			return writeExplanation(cmd.OutOrStdout(), res, output)
		},
	}
	f := cmd.Flags()
	f.StringVar(&from, "from", "", "the source: NAMESPACE/POD, an address or a CIDR")
	f.StringVar(&to, "to", "", "the destination: NAMESPACE/POD, a Service (svc/NAMESPACE/NAME or its ClusterIP), an address or a CIDR")
	f.StringVar(&port, "port", "", "the destination port: PORT or PORT/PROTO (tcp, udp or sctp; default tcp)")
	addFamilyFlag(cmd, &family, "")
	f.DurationVar(&timeout, "timeout", api.DefaultTimeout, "how long to wait for the agent")
	addManifestsFlag(cmd, &dir)
	addSocketFlag(cmd, &socket)
	addOutputFlag(cmd, &output)
	return cmd
}

// manifestSnapshot loads dir as the standalone agent does; a pod without
// an address in its status gets the ones its lockstep.dev/ip annotation
// pins, which the agent would give it.
func manifestSnapshot(dir string) (*policy.Snapshot, error) {
	objs, err := manifests.Load(dir)
	if err != nil {
		return nil, err
	}
	return explain.ManifestSnapshot(objs, func(p *policyapi.Pod) ([]netip.Addr, error) {
		text, ok := p.Annotations[endpoints.PinnedIPAnnotation]
		if !ok || p.Status.PodIP != "" || len(p.Status.PodIPs) > 0 {
			return nil, nil
		}
		pins, err := endpoints.ParsePins(text)
		if err != nil {
			return nil, fmt.Errorf("pod %s/%s: annotation %s: %w", p.Namespace, p.Name, endpoints.PinnedIPAnnotation, err)
		}
		var addrs []netip.Addr
		for _, a := range pins {
			if a.IsValid() {
				addrs = append(addrs, a)
			}
		}
		return addrs, nil
	})
}

func writeExplanation(w io.Writer, res *explain.Result, output string) error {
	if output != outputTable {
		return writeStructured(w, output, res)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Connection:\t%s -> %s on %d/%s\n", partyText(res.From), partyText(res.To), res.Port, res.Protocol)
	fmt.Fprintf(tw, "Verdict:\t%s\n", strings.ToUpper(res.Verdict))
	if res.To.Service == "" {
		writeSides(tw, res, "")
		return tw.Flush()
	}
	fmt.Fprintf(tw, "Reason:\t%s\n", res.Reason)
	for _, b := range res.Backends {
		fmt.Fprintf(tw, "Backend %s on %d/%s: %s\n", partyText(b.To), b.Port, b.Protocol, strings.ToUpper(b.Verdict))
		writeSides(tw, &b, "  ")
	}
	return tw.Flush()
}

// writeSides writes the egress and ingress sides of a connection to a
// pod or an address, each line indented by indent.
func writeSides(tw io.Writer, res *explain.Result, indent string) {
	for _, sd := range []explain.Side{res.Egress, res.Ingress} {
		fmt.Fprintf(tw, "%s%s of %s:\n", indent, capitalise(sd.Direction), sd.Endpoint)
		if sd.External {
			fmt.Fprintf(tw, "%s  Verdict:\t%s: %s\n", indent, sd.Verdict, sd.Reason)
			continue
		}
		isolated := "no"
		if sd.Isolated {
			isolated = "yes"
		}
		fmt.Fprintf(tw, "%s  Isolated:\t%s\n", indent, isolated)
		fmt.Fprintf(tw, "%s  Policies:\t%s\n", indent, listOrNone(sd.Policies))
		for _, f := range sd.FailedPolicies {
			fmt.Fprintf(tw, "%s  Failing closed:\t%s: %s\n", indent, f.Policy, f.Reason)
		}
		if sd.Isolated {
			fmt.Fprintf(tw, "%s  Allowed by:\t%s\n", indent, listOrNone(sd.AllowedBy))
		}
		fmt.Fprintf(tw, "%s  Verdict:\t%s: %s\n", indent, sd.Verdict, sd.Reason)
	}
}

func partyText(p explain.Party) string {
	if (p.Pod != "" || p.Service != "") && p.Address != "" {
		return p.String() + " (" + p.Address + ")"
	}
	return p.String()
}

func capitalise(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func listOrNone(items []string) string {
	if len(items) == 0 {
		return "none"
	}
	return strings.Join(items, ", ")
}

// familyNumber maps --family to the IP version explain takes (0: none given).
func familyNumber(f string) (int, error) {
	switch f {
	case "":
		return 0, nil
	case probe.IPv4:
		return 4, nil
	case probe.IPv6:
		return 6, nil
	}
	return 0, fmt.Errorf("parse --family %q: want IPv4 or IPv6", f)
}
