package probe

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"lockstep.dev/lockstep/agent/manifests"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// The ways a probe reaches its destinations (Config.Via, --via).
const (
	// ViaPodIP connects to every pod's own address on every port it
	// declares.
	ViaPodIP = "pod-ip"
	// ViaService connects to every frontend (ClusterIP and Service port)
	// of every Service, and lets the dataplane pick the backend.
	ViaService = "service"
	// ViaBoth does both, pod addresses first.
	ViaBoth = "both"
)

// DefaultAttempts is how many connections a probe through a Service makes
// at most (Config.Attempts). See Outcome for what a cell is decided on.
const DefaultAttempts = 16

// Service is what the probe needs to know about a Service: its name, its
// ClusterIPs and its ports. Its backends are the dataplane's business: the
// agent computes them from the same manifests.
type Service struct {
	Namespace string
	Name      string
	// ClusterIPs are the Service's addresses, IPv4 then IPv6 (zero where it
	// has none of that family).
	ClusterIPs [2]netip.Addr
	// Ports are the Service ports, sorted as table blocks are.
	Ports []Port
	// Affinity is sessionAffinity ClientIP: every connection of one client
	// goes to one backend, so a partly allowed Service shows '.' or 'X'
	// per client instead of '~'.
	Affinity bool
}

// Key returns NAMESPACE/NAME, the name of the Service in results and
// tables.
func (s Service) Key() string { return s.Namespace + "/" + s.Name }

// FromPolicyServices converts manifest Services to the Services a probe
// connects through. Headless and ExternalName Services have no ClusterIP
// to connect to, and one labelled for another proxy
// (service.kubernetes.io/service-proxy-name) is neither lockstep's nor
// kube-proxy's to translate; they are left out and named in skipped.
func FromPolicyServices(in []policyapi.Service) (svcs []Service, skipped []string, err error) {
	for _, ks := range in {
		s := Service{Namespace: policyapi.NamespaceOrDefault(ks.Namespace), Name: ks.Name, Affinity: ks.Spec.SessionAffinity == policyapi.ServiceAffinityClientIP}
		ips := ks.Spec.ClusterIPs
		if len(ips) == 0 && ks.Spec.ClusterIP != "" {
			ips = []string{ks.Spec.ClusterIP}
		}
		_, otherProxy := ks.Labels[policyapi.ServiceProxyNameLabel]
		if ks.Spec.Type == policyapi.ServiceTypeExternalName || len(ips) == 0 || ips[0] == policyapi.ClusterIPNone || otherProxy {
			skipped = append(skipped, s.Key())
			continue
		}
		for _, text := range ips {
			a, err := netip.ParseAddr(text)
			if err != nil {
				return nil, nil, fmt.Errorf("service %s: clusterIP %q is not an address", s.Key(), text)
			}
			a = a.Unmap()
			s.ClusterIPs[familyIndex(a)] = a
		}
		for _, sp := range ks.Spec.Ports {
			if sp.Port < 1 || sp.Port > 65535 {
				return nil, nil, fmt.Errorf("service %s: port %d is not 1-65535", s.Key(), sp.Port)
			}
			proto := cmp.Or(Protocol(sp.Protocol), TCP)
			if proto.rank() > 2 {
				return nil, nil, fmt.Errorf("service %s: port %d: protocol %q is not TCP, UDP or SCTP", s.Key(), sp.Port, sp.Protocol)
			}
			s.Ports = append(s.Ports, Port{Port: uint16(sp.Port), Protocol: proto})
		}
		s.Ports = normalisePorts(s.Ports)
		svcs = append(svcs, s)
	}
	return svcs, skipped, nil
}

// LoadServices reads the Services of a manifests directory (as the agent's
// --manifests reads it) and converts them with FromPolicyServices.
func LoadServices(dir string) (svcs []Service, skipped []string, err error) {
	objs, err := manifests.Load(dir)
	if err != nil {
		return nil, nil, err
	}
	in := make([]policyapi.Service, len(objs.Services))
	for i, s := range objs.Services {
		in[i] = *s
	}
	return FromPolicyServices(in)
}

// familyIndex is 0 for an IPv4 address and 1 for IPv6, the order of
// Pod.WantIPs and Service.ClusterIPs.
func familyIndex(a netip.Addr) int {
	if a.Is6() {
		return 1
	}
	return 0
}

// ServiceInfo is a probed Service in a Report.
type ServiceInfo struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// IP is the ClusterIP the probes were sent to.
	IP string `json:"ip"`
	// Ports are the Service ports, sorted as table blocks are.
	Ports []Port `json:"ports"`
}

// Key returns NAMESPACE/NAME.
func (s ServiceInfo) Key() string { return s.Namespace + "/" + s.Name }

// Outcome is what the connections from one pod to one frontend of a
// Service found, over several attempts: each new connection lands on a
// backend the dataplane picks, so one attempt says nothing about the
// others.
type Outcome string

// Outcomes of a probe through a Service, with their table cells.
const (
	// OutcomeAllowed ('.'): every attempt was answered.
	OutcomeAllowed Outcome = "allowed"
	// OutcomeDenied ('X'): no attempt was answered or refused: the
	// dataplane dropped them all.
	OutcomeDenied Outcome = "denied"
	// OutcomePartial ('~'): some attempts were answered and some were not:
	// the Service has backends this client may reach and backends it may
	// not.
	OutcomePartial Outcome = "partial"
	// OutcomeRefused ('R'): no attempt was answered and some were refused
	// at once (TCP reset, ICMP port unreachable), as a Service without a
	// ready endpoint is; a policy's denial is a silent drop. Not every
	// attempt need be refused: the kernel rate-limits the ICMP errors
	// that refuse UDP (the probe's node lifts the per-destination limit,
	// not net.ipv4.icmp_msgs_per_sec), and an attempt whose error was
	// never sent times out like a drop.
	OutcomeRefused Outcome = "refused"
	// OutcomeUnprobeable ('?'): no attempt could be made.
	OutcomeUnprobeable Outcome = "unprobeable"
)

// Cell returns the table cell of o.
func (o Outcome) Cell() byte {
	switch o {
	case OutcomeAllowed:
		return CellAllowed
	case OutcomeDenied:
		return CellDenied
	case OutcomePartial:
		return CellPartial
	case OutcomeRefused:
		return CellRefused
	}
	return CellUnprobeable
}

// decide returns the outcome of attempts that were answered, refused
// and dropped (timed out or unreachable); attempts that could not be made
// are not counted.
func decide(answered, refused, dropped int) Outcome {
	switch {
	case answered+refused+dropped == 0:
		return OutcomeUnprobeable
	case refused+dropped == 0:
		return OutcomeAllowed
	case answered > 0:
		return OutcomePartial
	case refused > 0:
		return OutcomeRefused
	}
	return OutcomeDenied
}

// ServiceResult is the outcome of the probes from one pod to one frontend
// of a Service.
type ServiceResult struct {
	From string `json:"from"`
	// Service is the Service's NAMESPACE/NAME.
	Service  string   `json:"service"`
	Port     uint16   `json:"port"`
	Protocol Protocol `json:"protocol"`
	Outcome  Outcome  `json:"outcome"`
	// Attempts counts the connections that got an answer, a refusal or a
	// drop; Answered, Refused and Dropped split them.
	Attempts int `json:"attempts"`
	Answered int `json:"answered"`
	Refused  int `json:"refused"`
	Dropped  int `json:"dropped"`
	// Backends are the pods that answered, sorted.
	Backends []string `json:"backends,omitempty"`
	// Error says why attempts could not be made, when some could not.
	Error string `json:"error,omitempty"`
	// Explained is the outcome `lockstep explain` expects, judging the
	// connection on each of the Service's ready backends, and Reason why
	// (see Report.Explain); empty when the report was not explained.
	Explained Outcome `json:"explained,omitempty"`
	Reason    string  `json:"reason,omitempty"`
}

func compareServiceResults(a, b ServiceResult) int {
	return cmp.Or(
		comparePodKeys(a.From, b.From),
		comparePodKeys(a.Service, b.Service),
		compareProtocols(a.Protocol, b.Protocol),
		cmp.Compare(a.Port, b.Port),
	)
}

// ServiceCounts returns how many frontends each outcome was found for.
func (r *Report) ServiceCounts() map[Outcome]int {
	n := make(map[Outcome]int, 5)
	for _, res := range r.ServiceResults {
		n[res.Outcome]++
	}
	return n
}

// describeCounts says "3 allowed, 1 partial" for counts, in the order of
// outcomes, leaving out outcomes never found.
func describeCounts(n map[Outcome]int) string {
	var parts []string
	for _, o := range []Outcome{OutcomeAllowed, OutcomePartial, OutcomeDenied, OutcomeRefused, OutcomeUnprobeable} {
		if n[o] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n[o], o))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// sortServices puts Services in namespace/name order.
func sortServices(s []ServiceInfo) {
	slices.SortFunc(s, func(a, b ServiceInfo) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	for i := range s {
		slices.SortFunc(s[i].Ports, comparePorts)
	}
}
