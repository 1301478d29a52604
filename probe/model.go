package probe

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// The IP families a probe can connect over, named as Kubernetes names
// them (Service.spec.ipFamilies). They build on every platform: `lockstep
// explain --family` reads them too.
const (
	IPv4 = "IPv4"
	IPv6 = "IPv6"
)

// Protocol is a transport protocol as Kubernetes spells it in a container
// port or a NetworkPolicy port.
type Protocol string

// Protocols a pod can declare. Tables and results list them in this order.
const (
	TCP  Protocol = "TCP"
	UDP  Protocol = "UDP"
	SCTP Protocol = "SCTP"
)

// rank orders protocols TCP, UDP, SCTP, then any other by name.
func (p Protocol) rank() int {
	switch p {
	case TCP:
		return 0
	case UDP:
		return 1
	case SCTP:
		return 2
	}
	return 3
}

func compareProtocols(a, b Protocol) int {
	return cmp.Or(cmp.Compare(a.rank(), b.rank()), strings.Compare(string(a), string(b)))
}

// Port is one port a pod listens on.
type Port struct {
	Port     uint16   `json:"port"`
	Protocol Protocol `json:"protocol"`
}

// String returns PORT/PROTOCOL, e.g. "80/TCP", the heading of a table block.
func (p Port) String() string { return strconv.Itoa(int(p.Port)) + "/" + string(p.Protocol) }

// ParsePort reads PORT/PROTOCOL as Port.String writes it.
func ParsePort(s string) (Port, error) {
	num, proto, ok := strings.Cut(s, "/")
	if !ok {
		return Port{}, fmt.Errorf("parse port %q: want PORT/PROTOCOL, e.g. 80/TCP", s)
	}
	n, err := strconv.ParseUint(num, 10, 16)
	if err != nil || n == 0 {
		return Port{}, fmt.Errorf("parse port %q: want a port number 1-65535", s)
	}
	p := Protocol(proto)
	if p.rank() > 2 {
		return Port{}, fmt.Errorf("parse port %q: protocol must be TCP, UDP or SCTP", s)
	}
	return Port{Port: uint16(n), Protocol: p}, nil
}

func comparePorts(a, b Port) int {
	return cmp.Or(compareProtocols(a.Protocol, b.Protocol), cmp.Compare(a.Port, b.Port))
}

// Pod is what the probe needs to know about a pod: who it is and what it
// listens on.
type Pod struct {
	Namespace string
	Name      string
	// UID is passed to the plugin as K8S_POD_UID; empty means one derived
	// from the namespace and name.
	UID string
	// WantIPs are the addresses the pod pins with the lockstep.dev/ip
	// annotation, IPv4 then IPv6 (zero Addrs where it pins none). The
	// agent reads the annotation itself; the probe only warns when the pod
	// got another address of the family it probes.
	WantIPs [2]netip.Addr
	// Ports are the declared container ports; duplicates are ignored.
	Ports []Port
}

// Key returns NAMESPACE/NAME, the name of the pod in results and tables.
func (p Pod) Key() string { return p.Namespace + "/" + p.Name }

// PodInfo is a probed pod in a Report.
type PodInfo struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// IP is the address the probes were sent to.
	IP string `json:"ip"`
	// Ports are the ports the pod declares, sorted as table blocks are.
	Ports []Port `json:"ports"`
}

// Key returns NAMESPACE/NAME.
func (p PodInfo) Key() string { return p.Namespace + "/" + p.Name }

// Result is the outcome of one probe.
type Result struct {
	From     string   `json:"from"`
	To       string   `json:"to"`
	Port     uint16   `json:"port"`
	Protocol Protocol `json:"protocol"`
	// Allowed is nil when the probe could not be made; Error says why.
	Allowed *bool  `json:"allowed"`
	Error   string `json:"error,omitempty"`
	// Explained is what `lockstep explain` says of the connection, allow
	// or deny, and Reason why (see Report.Explain); empty when the report
	// was not explained.
	Explained string `json:"explained,omitempty"`
	Reason    string `json:"reason,omitempty"`
}

// Report is everything a probe run found.
type Report struct {
	// Via is how the destinations were reached: ViaPodIP, ViaService or
	// ViaBoth. Empty reads as ViaPodIP.
	Via     string    `json:"via,omitempty"`
	Pods    []PodInfo `json:"pods"`
	Results []Result  `json:"results"`
	// Services and ServiceResults are the probes through Services (Via
	// ViaService or ViaBoth).
	Services       []ServiceInfo   `json:"services,omitempty"`
	ServiceResults []ServiceResult `json:"serviceResults,omitempty"`
}

// viaPodIP and viaService report which views the report holds.
func (r *Report) viaPodIP() bool   { return r.Via != ViaService }
func (r *Report) viaService() bool { return r.Via == ViaService || r.Via == ViaBoth }

// Sort puts pods and Services in namespace/name order (ports inside each
// in table order) and results in from, to, protocol (TCP, UDP, SCTP),
// port order.
func (r *Report) Sort() {
	slices.SortFunc(r.Pods, func(a, b PodInfo) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	for i := range r.Pods {
		slices.SortFunc(r.Pods[i].Ports, comparePorts)
	}
	slices.SortFunc(r.Results, compareResults)
	sortServices(r.Services)
	slices.SortFunc(r.ServiceResults, compareServiceResults)
}

func compareResults(a, b Result) int {
	return cmp.Or(
		comparePodKeys(a.From, b.From),
		comparePodKeys(a.To, b.To),
		compareProtocols(a.Protocol, b.Protocol),
		cmp.Compare(a.Port, b.Port),
	)
}

// comparePodKeys orders NAMESPACE/NAME keys by namespace, then name (plain
// string order would put "a-b/c" before "a/c").
func comparePodKeys(a, b string) int {
	an, am, _ := strings.Cut(a, "/")
	bn, bm, _ := strings.Cut(b, "/")
	return cmp.Or(strings.Compare(an, bn), strings.Compare(am, bm))
}

// Counts returns how many results by pod address were allowed, denied and
// unprobeable.
func (r *Report) Counts() (allowed, denied, unprobeable int) {
	for _, res := range r.Results {
		switch {
		case res.Allowed == nil:
			unprobeable++
		case *res.Allowed:
			allowed++
		default:
			denied++
		}
	}
	return allowed, denied, unprobeable
}

// normalisePorts returns ports sorted and without duplicates, with an empty
// protocol read as TCP (the Kubernetes default).
func normalisePorts(ports []Port) []Port {
	out := make([]Port, 0, len(ports))
	for _, p := range ports {
		if p.Protocol == "" {
			p.Protocol = TCP
		}
		out = append(out, p)
	}
	slices.SortFunc(out, comparePorts)
	return slices.Compact(out)
}
