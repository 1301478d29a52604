package kubee2e

import (
	"fmt"
	"regexp"
	"strings"
)

// NetpolFocus selects the NetworkPolicy specs of the suite: every spec
// tagged [Feature:NetworkPolicy] and the rest of test/e2e/network/netpol
// (the NetworkPolicy API specs), all of which the suite names
// "[sig-network] Netpol ...".
var NetpolFocus = []string{`\[Feature:NetworkPolicy\]`, `\[sig-network\] Netpol `}

// SCTPSpecs matches the specs that open SCTP connections; a kernel without
// SCTP cannot run them.
const SCTPSpecs = `\[Feature:SCTPConnectivity\]`

// NetpolSkips are the parts of NetpolFocus this machine cannot run, with
// why: the SCTP specs when sctpErr (CheckSCTP's answer) is not nil.
func NetpolSkips(sctpErr error) []Skip {
	if sctpErr == nil {
		return nil
	}
	return []Skip{{Pattern: SCTPSpecs, Reason: "this kernel has no SCTP: " + sctpErr.Error()}}
}

// Probe is one probe of a NetworkPolicy spec that answered other than the
// spec's reachability table expected.
type Probe struct {
	// From and To are the pods, as the spec's tables name them: the
	// namespace without its random suffix (netpol-x-2962 is x), then the
	// pod ("x/a").
	From, To string
	// Want and Got are "allowed" or "blocked".
	Want, Got string
	// Command reruns the probe (kubectl exec ... /agnhost connect ...),
	// with the real namespace.
	Command string
}

// String is "x/a -> x/b: want blocked, got allowed".
func (p Probe) String() string {
	return fmt.Sprintf("%s -> %s: want %s, got %s", p.From, p.To, p.Want, p.Got)
}

// WrongProbes returns the probes that answered wrong, from a failed
// NetworkPolicy spec's output (Spec.Output), in the order logged, each
// once. A pod's probe of itself is left out, as the spec leaves it out of
// its verdict (hairpin traffic through the pod's own Service).
func WrongProbes(output string) []Probe {
	var out []Probe
	seen := map[Probe]bool{}
	var from, to string
	for _, line := range strings.Split(output, "\n") {
		if m := validationFailed.FindStringSubmatch(line); m != nil {
			from, to = shortNamespaces.ReplaceAllString(m[1], "$1"), shortNamespaces.ReplaceAllString(m[2], "$1")
			continue
		}
		m := expectedInstead.FindStringSubmatch(line)
		if m == nil || from == "" {
			continue
		}
		p := Probe{From: from, To: to, Want: m[1], Got: strings.ToLower(m[2]), Command: m[3]}
		if p.From != p.To && !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
		from, to = "", ""
	}
	return out
}

// The lines test/e2e/network/netpol/probe.go logs for a probe that
// answered wrong.
var (
	validationFailed = regexp.MustCompile(`Validation of (\S+) -> (\S+) FAILED`)
	expectedInstead  = regexp.MustCompile(`Expected (allowed|blocked) pod connection was instead (BLOCKED|ALLOWED) --- run '([^']*)'`)
	shortNamespaces  = regexp.MustCompile(`netpol-([xyz])-[0-9]+`)
)
