package policy

import (
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// TestServicesOver: which namespaces the node's Service capacity leaves
// to kube-proxy. The largest shares go first, of frontends or of
// backends, whichever is larger against its bound; namespaces of equal
// share go together, so no tenant can push another out by how it names
// its namespaces.
func TestServicesOver(t *testing.T) {
	node := Limits{ServiceFrontends: 100, ServiceBackends: 400}
	cost := func(fe, be int) serviceCost { return serviceCost{frontends: fe, backends: be} }
	for _, tc := range []struct {
		name   string
		limits Limits
		costs  map[string]serviceCost
		want   []string
	}{
		{name: "everything fits", limits: node, costs: map[string]serviceCost{"a": cost(60, 200), "b": cost(40, 200)}},
		{name: "no bound", limits: Limits{}, costs: map[string]serviceCost{"a": cost(1e6, 1e6)}},
		{
			name:   "one namespace's frontends fill the node: it alone goes",
			limits: node,
			costs:  map[string]serviceCost{"hog": cost(200, 0), "a": cost(10, 40), "b": cost(10, 40)},
			want:   []string{"hog"},
		},
		{
			name:   "backends count as frontends do",
			limits: node,
			costs:  map[string]serviceCost{"hog": cost(1, 1000), "a": cost(50, 100)},
			want:   []string{"hog"},
		},
		{
			name:   "the share is the larger of the two: 30 of 100 frontends before 100 of 400 backends",
			limits: node,
			costs:  map[string]serviceCost{"fe": cost(30, 0), "be": cost(0, 100), "c": cost(28, 0), "d": cost(27, 0), "e": cost(20, 0)},
			want:   []string{"fe"},
		},
		{
			name:   "and 160 of 400 backends before 30 of 100 frontends",
			limits: node,
			costs:  map[string]serviceCost{"fe": cost(30, 0), "be": cost(0, 160), "c": cost(28, 0), "d": cost(27, 0), "e": cost(20, 0)},
			want:   []string{"be", "fe"},
		},
		{
			name:   "equal shares go together, whatever their names",
			limits: node,
			costs:  map[string]serviceCost{"a1": cost(40, 0), "a2": cost(40, 0), "zz-prod": cost(40, 0), "small": cost(5, 5)},
			want:   []string{"a1", "a2", "zz-prod"},
		},
		{
			name:   "a tie at a later cut goes whole",
			limits: Limits{ServiceFrontends: 50},
			costs:  map[string]serviceCost{"a": cost(60, 0), "b": cost(30, 0), "c": cost(30, 0)},
			want:   []string{"a", "b", "c"},
		},
		{
			name:   "a frontend of too many backends takes its namespace, though the node has room",
			limits: node,
			costs:  map[string]serviceCost{"wide": {frontends: 1, backends: 1, wide: 1}, "a": cost(10, 10)},
			want:   []string{"wide"},
		},
		{
			name:   "and frees the room it asked for",
			limits: node,
			costs:  map[string]serviceCost{"wide": {frontends: 90, backends: 70000, wide: 1}, "a": cost(60, 300)},
			want:   []string{"wide"},
		},
		{
			name:   "no bound on backends, none per frontend",
			limits: Limits{ServiceFrontends: 100},
			costs:  map[string]serviceCost{"wide": {frontends: 1, backends: 70000, wide: 1}},
		},
		{
			name:   "only the frontends bounded",
			limits: Limits{ServiceFrontends: 10},
			costs:  map[string]serviceCost{"a": cost(6, 1e6), "b": cost(5, 0)},
			want:   []string{"a"},
		},
		{
			name:   "only the backends bounded",
			limits: Limits{ServiceBackends: 10},
			costs:  map[string]serviceCost{"a": cost(1e6, 6), "b": cost(0, 5)},
			want:   []string{"a"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			over := tc.limits.servicesOver(tc.costs)
			if got := slices.Sorted(maps.Keys(over)); !slices.Equal(got, tc.want) {
				t.Errorf("left to kube-proxy %v, want %v", got, tc.want)
			}
			var total serviceCost
			for ns, c := range tc.costs {
				if over[ns] == "" {
					total = total.add(c)
				} else if !strings.Contains(over[ns], "namespace "+ns+"'s for") && !strings.Contains(over[ns], "namespace "+ns+" has a Service frontend of more than") {
					t.Errorf("reason for %s: %q", ns, over[ns])
				}
			}
			if (tc.limits.ServiceFrontends > 0 && total.frontends > tc.limits.ServiceFrontends) || (tc.limits.ServiceBackends > 0 && total.backends > tc.limits.ServiceBackends) {
				t.Errorf("what is kept, %+v, does not fit %+v", total, tc.limits)
			}
		})
	}
}

// manyPorts is Service ns/name on clusterIP with n TCP ports from 1000.
func manyPorts(ns, name, clusterIP string, n int) *policyapi.Service {
	ports := make([]string, n)
	for i := range ports {
		ports[i] = fmt.Sprintf("p%d:%d/TCP", i, 1000+i)
	}
	return mkService(ns, name, []string{clusterIP}, ports...)
}

// TestServicesOverCapacity: a namespace whose Services do not fit the
// node's Service maps is left to kube-proxy, and the other tenants'
// Services are translated as before: the state stays one a dataplane can
// apply. Compile and the incremental compiler agree at every step, and
// the namespace comes back when it fits again.
func TestServicesOverCapacity(t *testing.T) {
	limits := Limits{ServiceFrontends: 4, ServiceBackends: 8}
	tenant := mkService("tenant", "web", []string{"10.96.0.10"}, "http:80/TCP")
	tenantSlice := mkSlice("tenant", "web-1", "web", policyapi.AddressTypeIPv4, []string{"http:8080/TCP"}, ep("10.244.0.5"))
	tenantOnly := map[ServiceFrontend]*ServiceEntry{
		fe("10.96.0.10", 80, policyapi.ProtoTCP): {Service: "tenant/web", Backends: be("10.244.0.5:8080")},
	}
	squat := manyPorts("squat", "squat", "10.96.0.40", 1)
	squat.Spec.ExternalIPs = []string{"10.96.0.20"}
	inc := NewIncremental()
	inc.SetLimits(limits)
	inc.SetService(tenant)
	inc.SetEndpointSlice(tenantSlice)
	steps := []struct {
		name     string
		services []*policyapi.Service
		change   func()
		want     map[ServiceFrontend]*ServiceEntry
		over     []string
	}{
		{
			name:     "the tenant alone",
			services: []*policyapi.Service{tenant},
			change:   func() {},
			want:     tenantOnly,
		},
		{
			name:     "a Service of more frontends than the node holds",
			services: []*policyapi.Service{tenant, manyPorts("hog", "big", "10.96.0.20", 5)},
			change:   func() { inc.SetService(manyPorts("hog", "big", "10.96.0.20", 5)) },
			want:     tenantOnly,
			over:     []string{"hog"},
		},
		{
			name:     "the hog's Service shrinks to fit",
			services: []*policyapi.Service{tenant, manyPorts("hog", "big", "10.96.0.20", 3)},
			change:   func() { inc.SetService(manyPorts("hog", "big", "10.96.0.20", 3)) },
			want: func() map[ServiceFrontend]*ServiceEntry {
				m := maps.Clone(tenantOnly)
				for i := range 3 {
					m[fe("10.96.0.20", uint16(1000+i), policyapi.ProtoTCP)] = &ServiceEntry{Service: "hog/big"}
				}
				return m
			}(),
		},
		{
			name:     "two Services of the hog's together too many",
			services: []*policyapi.Service{tenant, manyPorts("hog", "big", "10.96.0.20", 3), manyPorts("hog", "more", "10.96.0.21", 1)},
			change:   func() { inc.SetService(manyPorts("hog", "more", "10.96.0.21", 1)) },
			want:     tenantOnly,
			over:     []string{"hog"},
		},
		{
			// The ClusterIP's claim wins, and kube-proxy translates it for
			// the hog: the externalIP takes nothing.
			name:     "another namespace's externalIP on the hog's ClusterIP",
			services: []*policyapi.Service{tenant, manyPorts("hog", "big", "10.96.0.20", 3), manyPorts("hog", "more", "10.96.0.21", 1), squat},
			change:   func() { inc.SetService(squat) },
			want: func() map[ServiceFrontend]*ServiceEntry {
				m := maps.Clone(tenantOnly)
				m[fe("10.96.0.40", 1000, policyapi.ProtoTCP)] = &ServiceEntry{Service: "squat/squat"}
				return m
			}(),
			over: []string{"hog"},
		},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			full, err := Compile(&Snapshot{Services: step.services, EndpointSlices: []*policyapi.EndpointSlice{tenantSlice}, Limits: limits})
			if err != nil {
				t.Fatal(err)
			}
			step.change()
			got, err := inc.Compile()
			if err != nil {
				t.Fatal(err)
			}
			for how, d := range map[string]*Desired{"Compile": full, "Incremental": got} {
				if !reflect.DeepEqual(d.Services, step.want) {
					t.Errorf("%s: Services\n%s\nwant\n%s", how, describeServices(d.Services), describeServices(step.want))
				}
				if names := slices.Sorted(maps.Keys(d.ServicesOverCapacity)); !slices.Equal(names, step.over) {
					t.Errorf("%s: over capacity %v, want %v", how, names, step.over)
				}
			}
		})
	}
}

// TestServiceOfTooManyBackendsPerFrontend: a frontend holds at most
// MaxBackendsPerFrontend backends in the eBPF dataplane; a namespace with
// a Service frontend of more is not translated, in Compile and the
// incremental compiler alike, and another namespace's Service is.
func TestServiceOfTooManyBackendsPerFrontend(t *testing.T) {
	big := mkService("big", "many", []string{"10.96.0.30"}, "http:80/TCP", "admin:81/TCP")
	other := mkService("tenant", "web", []string{"10.96.0.10"}, "http:80/TCP")
	eps := make([]policyapi.SliceEndpoint, MaxBackendsPerFrontend+1)
	for i := range eps {
		eps[i] = ep(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}).String())
	}
	for _, n := range []int{MaxBackendsPerFrontend, MaxBackendsPerFrontend + 1} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			slice := mkSlice("big", "many-1", "many", policyapi.AddressTypeIPv4, []string{"http:8080/TCP"}, eps[:n]...)
			snap := &Snapshot{Services: []*policyapi.Service{big, other}, EndpointSlices: []*policyapi.EndpointSlice{slice}, Limits: DefaultLimits}
			full, err := Compile(snap)
			if err != nil {
				t.Fatal(err)
			}
			inc := NewIncremental()
			inc.SetLimits(DefaultLimits)
			inc.SetService(big)
			inc.SetService(other)
			inc.SetEndpointSlice(slice)
			got, err := inc.Compile()
			if err != nil {
				t.Fatal(err)
			}
			for how, d := range map[string]*Desired{"Compile": full, "Incremental": got} {
				http, admin := d.Services[fe("10.96.0.30", 80, policyapi.ProtoTCP)], d.Services[fe("10.96.0.30", 81, policyapi.ProtoTCP)]
				translated := http != nil && len(http.Backends) == n && admin != nil
				if want := n <= MaxBackendsPerFrontend; translated != want || (d.ServicesOverCapacity["big"] == "") != want {
					t.Errorf("%s, %d backends: big/many translated %v, over capacity %q", how, n, translated, d.ServicesOverCapacity)
				}
				if d.Services[fe("10.96.0.10", 80, policyapi.ProtoTCP)] == nil || len(d.ServicesOverCapacity) > 1 {
					t.Errorf("%s, %d backends: tenant/web not translated, or over capacity too (%v)", how, n, d.ServicesOverCapacity)
				}
			}
		})
	}
}
