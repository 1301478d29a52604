package policy

import (
	"maps"
	"slices"

	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// Services depend on nothing but Services and EndpointSlices, so the
// incremental compiler keeps them apart from the policy state: a change
// recomputes the frontends of the Services it names, and an entry whose
// content did not change keeps its pointer.

// serviceInputs are the Services and EndpointSlices as last set, keyed by
// namespace and name as given (sources always set the namespace).
type serviceInputs struct {
	services map[objKey]*policyapi.Service
	slices   map[objKey]*policyapi.EndpointSlice
	// bySvc are the slices by the Service they name: their namespace and
	// ServiceNameLabel.
	bySvc map[objKey]map[objKey]*policyapi.EndpointSlice
	// dirty are the Services whose frontends must be recomputed.
	dirty map[objKey]struct{}
	// at is Snapshot.Node and Snapshot.Zone.
	at policyapi.Node
}

func newServiceInputs() serviceInputs {
	return serviceInputs{
		services: map[objKey]*policyapi.Service{},
		slices:   map[objKey]*policyapi.EndpointSlice{},
		bySvc:    map[objKey]map[objKey]*policyapi.EndpointSlice{},
		dirty:    map[objKey]struct{}{},
	}
}

// SetService adds s, or replaces the Service of its namespace and name.
func (c *Incremental) SetService(s *policyapi.Service) {
	k := objKey{s.Namespace, s.Name}
	if c.in.svc.services[k] == s {
		return
	}
	c.in.svc.services[k] = s
	c.in.svc.dirty[k] = struct{}{}
}

// DeleteService removes the Service namespace/name; its EndpointSlices
// stay, and count again if it comes back.
func (c *Incremental) DeleteService(namespace, name string) {
	k := objKey{namespace, name}
	if _, ok := c.in.svc.services[k]; !ok {
		return
	}
	delete(c.in.svc.services, k)
	c.in.svc.dirty[k] = struct{}{}
}

// SetEndpointSlice adds s, or replaces the slice of its namespace and
// name.
func (c *Incremental) SetEndpointSlice(s *policyapi.EndpointSlice) {
	k := objKey{s.Namespace, s.Name}
	old := c.in.svc.slices[k]
	if old == s {
		return
	}
	if old != nil {
		c.in.svc.unindex(k, old)
	}
	c.in.svc.slices[k] = s
	c.in.svc.index(k, s)
}

// DeleteEndpointSlice removes the slice namespace/name.
func (c *Incremental) DeleteEndpointSlice(namespace, name string) {
	k := objKey{namespace, name}
	old, ok := c.in.svc.slices[k]
	if !ok {
		return
	}
	delete(c.in.svc.slices, k)
	c.in.svc.unindex(k, old)
}

// index files slice k under its Service and marks that Service dirty.
func (in *serviceInputs) index(k objKey, s *policyapi.EndpointSlice) {
	name := s.ServiceName()
	if name == "" {
		return
	}
	sk := objKey{s.Namespace, name}
	m := in.bySvc[sk]
	if m == nil {
		m = map[objKey]*policyapi.EndpointSlice{}
		in.bySvc[sk] = m
	}
	m[k] = s
	in.dirty[sk] = struct{}{}
}

// unindex removes slice k, as s filed it, and marks its Service dirty.
func (in *serviceInputs) unindex(k objKey, s *policyapi.EndpointSlice) {
	name := s.ServiceName()
	if name == "" {
		return
	}
	sk := objKey{s.Namespace, name}
	delete(in.bySvc[sk], k)
	if len(in.bySvc[sk]) == 0 {
		delete(in.bySvc, sk)
	}
	in.dirty[sk] = struct{}{}
}

func (in *serviceInputs) markAllDirty() {
	for k := range in.services {
		in.dirty[k] = struct{}{}
	}
}

// serviceState is what the compiler derived from the Services: each
// Service's entries, which Services claim each frontend, and the
// published map.
type serviceState struct {
	entries map[objKey]map[ServiceFrontend]*ServiceEntry
	claims  map[ServiceFrontend]map[objKey]struct{}
	// out is the last published Services (nil when empty); dirty, the
	// frontends whose claims or entries changed since.
	out   map[ServiceFrontend]*ServiceEntry
	dirty map[ServiceFrontend]struct{}
	// nsCost is what each namespace's entries ask of the node; over, the
	// namespaces the limits leave untranslated (Limits.servicesOver),
	// and overChanged, whether over changed since it was last published.
	nsCost      map[string]serviceCost
	over        map[string]string
	overChanged bool
}

func newServiceState() serviceState {
	return serviceState{
		entries: map[objKey]map[ServiceFrontend]*ServiceEntry{},
		claims:  map[ServiceFrontend]map[objKey]struct{}{},
		dirty:   map[ServiceFrontend]struct{}{},
		nsCost:  map[string]serviceCost{},
	}
}

// updateServices recomputes the entries of the dirty Services, then
// which namespaces l leaves untranslated. An entry equal to the one its
// frontend had keeps that one's pointer: the Service's previous entry, or
// after a rebuild the previous result's.
func (st *state) updateServices(in *serviceInputs, l Limits) error {
	ss := &st.svc
	var prev map[ServiceFrontend]*ServiceEntry
	if st.prev != nil {
		prev = st.prev.Services
	}
	for _, k := range sortedKeys(in.dirty, compareObjKey) {
		var next map[ServiceFrontend]*ServiceEntry
		if s := in.services[k]; s != nil {
			cs, err := policyapi.ParseService(s)
			if err != nil {
				return err
			}
			next = serviceEntries(cs, slices.Collect(maps.Values(in.bySvc[k])), in.at)
		}
		old := ss.entries[k]
		for fe, e := range next {
			o := old[fe]
			if o == nil {
				o = prev[fe]
			}
			if o != nil && sameEntry(o, e) {
				next[fe] = o
				if old[fe] == o {
					continue
				}
			}
			claims := ss.claims[fe]
			if claims == nil {
				claims = map[objKey]struct{}{}
				ss.claims[fe] = claims
			}
			claims[k] = struct{}{}
			ss.dirty[fe] = struct{}{}
		}
		for fe := range old {
			if _, ok := next[fe]; ok {
				continue
			}
			delete(ss.claims[fe], k)
			if len(ss.claims[fe]) == 0 {
				delete(ss.claims, fe)
			}
			ss.dirty[fe] = struct{}{}
		}
		ns := serviceNamespace(k)
		if c := ss.nsCost[ns].sub(serviceCostOf(old)).add(serviceCostOf(next)); c == (serviceCost{}) {
			delete(ss.nsCost, ns)
		} else {
			ss.nsCost[ns] = c
		}
		if len(next) == 0 {
			delete(ss.entries, k)
		} else {
			ss.entries[k] = next
		}
	}
	if len(in.dirty) > 0 {
		ss.setOver(l.servicesOver(ss.nsCost))
	}
	return nil
}

// setOver makes over the namespaces left untranslated, and marks the
// frontends of those that went over or came back dirty.
func (ss *serviceState) setOver(over map[string]string) {
	if maps.Equal(over, ss.over) {
		return
	}
	var flipped map[string]bool
	for ns := range over {
		if _, ok := ss.over[ns]; !ok {
			mak(&flipped)[ns] = true
		}
	}
	for ns := range ss.over {
		if _, ok := over[ns]; !ok {
			mak(&flipped)[ns] = true
		}
	}
	ss.over, ss.overChanged = over, true
	if len(flipped) == 0 {
		return
	}
	for k, entries := range ss.entries {
		if flipped[serviceNamespace(k)] {
			for fe := range entries {
				ss.dirty[fe] = struct{}{}
			}
		}
	}
}

// publishServices returns the Services of the result: the last map when
// no frontend changed, else a copy with the changes (nil when empty). A
// frontend two Services claim goes to the first by namespace/name, as in
// Compile. A new map made from the last one comes with that one as its
// base and the frontends that changed (Desired.ServicesBase).
func (st *state) publishServices(first bool) (out, base map[ServiceFrontend]*ServiceEntry, changed []ServiceFrontend) {
	ss := &st.svc
	if !first && len(ss.dirty) == 0 {
		return ss.out, nil, nil
	}
	type change struct {
		fe  ServiceFrontend
		ent *ServiceEntry // nil: no Service claims fe any more
	}
	var changes []change
	for fe := range ss.dirty {
		var ent *ServiceEntry
		if claims := ss.claims[fe]; len(claims) > 0 {
			owner := slices.MinFunc(slices.Collect(maps.Keys(claims)), func(a, b objKey) int {
				return compareClaim(a, ss.entries[a][fe], b, ss.entries[b][fe])
			})
			if ent = ss.entries[owner][fe]; ent.leftToKubeProxy || ss.over[serviceNamespace(owner)] != "" {
				ent = nil // kube-proxy's: claimed, not translated
			}
		}
		if cur, ok := ss.out[fe]; ok == (ent != nil) && cur == ent {
			continue
		}
		changes = append(changes, change{fe, ent})
	}
	reset(&ss.dirty)
	if len(changes) > 0 {
		base = ss.out
		changed = make([]ServiceFrontend, len(changes))
		for i, c := range changes {
			changed[i] = c.fe
		}
		m := maps.Clone(ss.out)
		if m == nil {
			m = make(map[ServiceFrontend]*ServiceEntry, len(changes))
		}
		for _, c := range changes {
			if c.ent == nil {
				delete(m, c.fe)
			} else {
				m[c.fe] = c.ent
			}
		}
		if len(m) == 0 {
			m = nil
		}
		ss.out = m
	}
	if first && st.prev != nil && maps.Equal(ss.out, st.prev.Services) {
		ss.out = st.prev.Services
		base, changed = nil, nil
	}
	if ss.out == nil || base == nil {
		base, changed = nil, nil
	}
	return ss.out, base, changed
}
