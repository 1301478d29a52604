//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cilium/ebpf"

	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/bpfmaps"
)

// Service frontends live in lockstep_services, one entry per frontend
// with a copy of its backend count and affinity timeout per parity, and
// their backends in lockstep_backends, one entry per frontend, parity and
// slot. Like the inner policy maps, each parity has backends of its own,
// and Apply rewrites the idle parity's slots in place before the flip: a
// packet reads the generation once and sees the old backends with the old
// policy or the new with the new.
//
// Slots are stable: a backend keeps its slot from one generation to the
// next (a removed backend's slot is filled by a new one, or by the last
// slot's), so that a change of one backend writes a slot or two, and so
// that an affinity entry, which names a slot, survives changes of the
// other backends.
//
// A frontend the new state no longer has is absent from the written
// parity (count SvcAbsent, no slots). After the flip, packets that read
// the previous generation may still use its entry and the slots of the
// now idle parity: the settler deletes them once a grace period has
// passed, as it catches the idle parity up with the live one. An Apply
// that comes first (it waits for the same grace period) does it itself.

// svcEntry is what lockstep_services and lockstep_backends hold for one
// frontend.
type svcEntry struct {
	key    bpfmaps.SvcKey
	v      bpfmaps.SvcValue
	vKnown [2]bool // v's copy of that parity is what the map holds
	// slots[parity] is what the backend slots of that parity hold.
	slots [2][]backendSlot
	// src[parity] is the ServiceEntry that parity was written from, while
	// it holds exactly that (fast path), else nil.
	src  [2]*policy.ServiceEntry
	mark uint64
}

// backendSlot is one slot of lockstep_backends as the mirror knows it.
type backendSlot struct {
	b     policy.ServiceBackend
	state slotState
}

type slotState uint8

const (
	slotEmpty   slotState = iota // no entry
	slotHolds                    // an entry holding b
	slotUnknown                  // maybe an entry, content unknown (a write failed)
)

// ErrServiceCapacity: the state has more Service frontends or backends
// than the maps hold (maps.MaxFrontends and maps.MaxBackends per node, at
// most 65533 backends per frontend). Apply refuses it whole.
var ErrServiceCapacity = errors.New("too many Service frontends or backends")

// maxBackendsPerFrontend is the largest count a svc_value holds below
// its markers, SvcNoLocal and SvcAbsent.
const maxBackendsPerFrontend = int(bpfmaps.SvcNoLocal) - 1

// svcWant is one frontend of the desired state as the maps store it.
type svcWant struct {
	key      bpfmaps.SvcKey
	src      *policy.ServiceEntry
	backends []policy.ServiceBackend // of the frontend's family, sorted
	affinity uint32                  // seconds
	noLocal  bool                    // policy.ServiceEntry.NoLocalBackend
	mark     uint32                  // the masquerade mark of an external frontend, else 0
}

// svcKey returns the map key of fe, and whether lockstep translates it.
func svcKey(fe policy.ServiceFrontend) (bpfmaps.SvcKey, bool) {
	switch fe.Proto {
	case policyapi.ProtoTCP, policyapi.ProtoUDP, policyapi.ProtoSCTP:
	default:
		return bpfmaps.SvcKey{}, false
	}
	if !fe.Addr.IsValid() || fe.Port == 0 {
		return bpfmaps.SvcKey{}, false
	}
	return bpfmaps.SvcKey{Addr: bpfmaps.AddrFrom(fe.Addr.Unmap()), Port: fe.Port, Proto: fe.Proto}, true
}

// svcCheck is what checkServices concluded about one frontend and the
// *policy.ServiceEntry it had: ServiceEntry values are immutable, so the
// conclusion holds as long as the pointer does.
type svcCheck struct {
	src  *policy.ServiceEntry
	want svcWant
	ok   bool // lockstep translates it
}

// svcTotals are the frontends lockstep translates and their backends.
type svcTotals struct{ frontends, backends int }

func (t *svcTotals) add(c svcCheck, sign int) {
	if c.ok {
		t.frontends += sign
		t.backends += sign * len(c.want.backends)
	}
}

// check returns an error wrapping ErrServiceCapacity when t does not fit
// the maps.
func (t svcTotals) check() error {
	if t.frontends > bpfmaps.MaxFrontends {
		return fmt.Errorf("apply services: %d frontends, at most %d per node: %w", t.frontends, bpfmaps.MaxFrontends, ErrServiceCapacity)
	}
	if t.backends > bpfmaps.MaxBackends {
		return fmt.Errorf("apply services: %d backends, at most %d per node: %w", t.backends, bpfmaps.MaxBackends, ErrServiceCapacity)
	}
	return nil
}

// svcDelta is one change of Desired.Services as the compiler described
// it: to is from with the frontends of changed changed.
type svcDelta struct {
	from, to map[policy.ServiceFrontend]*policy.ServiceEntry
	changed  []policy.ServiceFrontend
}

// maxSvcDeltas is how many svcDeltas the datapath keeps: a parity is
// normally one change behind (the settler caught it up) or two.
const maxSvcDeltas = 4

// svcPlan is what Apply writes of the Service maps into a parity: every
// frontend lockstep translates (all), or, when the parity holds a state
// that the recorded changes lead from to the desired one, only the
// frontends they changed (changed, incremental).
type svcPlan struct {
	all         []svcWant
	changed     []policy.ServiceFrontend
	incremental bool
}

// wantServices checks want's Services (see checkServices) and plans the
// writes of a parity that holds written's frontends (nil: unknown).
func (d *Datapath) wantServices(want *policy.Desired, written map[policy.ServiceFrontend]*policy.ServiceEntry) (svcPlan, error) {
	if err := d.checkServices(want); err != nil {
		return svcPlan{}, err
	}
	if want.ServicesBase != nil {
		if n := len(d.svcDeltas); n == 0 || !sameMap(d.svcDeltas[n-1].to, want.Services) {
			if n == maxSvcDeltas {
				d.svcDeltas = slices.Delete(d.svcDeltas, 0, 1)
			}
			d.svcDeltas = append(d.svcDeltas, svcDelta{from: want.ServicesBase, to: want.Services, changed: want.ServicesChanged})
		}
	}
	if fes, ok := d.servicesSince(written, want.Services); ok {
		return svcPlan{changed: fes, incremental: true}, nil
	}
	all := make([]svcWant, 0, d.svcTotals.frontends)
	for _, c := range d.svcChecked {
		if c.ok {
			all = append(all, c.want)
		}
	}
	return svcPlan{all: all}, nil
}

// servicesSince returns the frontends that may differ between from and
// to, when the recorded changes lead from one to the other.
func (d *Datapath) servicesSince(from, to map[policy.ServiceFrontend]*policy.ServiceEntry) ([]policy.ServiceFrontend, bool) {
	if from == nil || to == nil {
		return nil, false
	}
	var fes []policy.ServiceFrontend
	cur := to
	for i := len(d.svcDeltas) - 1; i >= 0 && !sameMap(cur, from); i-- {
		dl := d.svcDeltas[i]
		if !sameMap(dl.to, cur) {
			return nil, false
		}
		fes = append(fes, dl.changed...)
		cur = dl.from
	}
	return fes, sameMap(cur, from)
}

// checkServices brings svcChecked to want.Services: which frontends
// lockstep translates and how. It leaves out (and logs, once) frontends
// of other protocols and SCTP frontends with a backend on another port
// than the Service's (their CRC32c covers the ports: kube-proxy
// translates them), and backends of the other family (no 4→6
// translation). A frontend whose entry it saw before is not looked at
// again; when want.Services is a change of the map last checked
// (Desired.ServicesBase), only the changed frontends are. A state that
// does not fit the maps is an error wrapping ErrServiceCapacity and
// leaves svcChecked as it was.
func (d *Datapath) checkServices(want *policy.Desired) error {
	if sameMap(d.svcCheckedFor, want.Services) {
		return nil
	}
	if want.ServicesBase != nil && sameMap(d.svcCheckedFor, want.ServicesBase) {
		return d.checkChangedServices(want)
	}
	checked := make(map[policy.ServiceFrontend]svcCheck, len(want.Services))
	var tot svcTotals
	for fe, se := range want.Services {
		c, ok := d.svcChecked[fe]
		if !ok || c.src != se || se == nil {
			c = d.checkService(fe, se)
		}
		if err := tooManyBackends(fe, c); err != nil {
			return err
		}
		checked[fe] = c
		tot.add(c, 1)
	}
	if err := tot.check(); err != nil {
		return err
	}
	d.svcChecked, d.svcTotals, d.svcCheckedFor = checked, tot, want.Services
	return nil
}

// checkChangedServices is checkServices for want.ServicesChanged alone:
// it checks them aside and changes svcChecked only once the whole state
// fits.
func (d *Datapath) checkChangedServices(want *policy.Desired) error {
	next := make(map[policy.ServiceFrontend]*svcCheck, len(want.ServicesChanged)) // nil: gone
	tot := d.svcTotals
	for _, fe := range want.ServicesChanged {
		if _, seen := next[fe]; seen {
			continue
		}
		old, had := d.svcChecked[fe]
		if had {
			tot.add(old, -1)
		}
		se, ok := want.Services[fe]
		if !ok {
			next[fe] = nil
			continue
		}
		c := old
		if !had || c.src != se || se == nil {
			c = d.checkService(fe, se)
		}
		if err := tooManyBackends(fe, c); err != nil {
			return err
		}
		tot.add(c, 1)
		next[fe] = &c
	}
	if err := tot.check(); err != nil {
		return err
	}
	for fe, c := range next {
		if c == nil {
			delete(d.svcChecked, fe)
		} else {
			d.svcChecked[fe] = *c
		}
	}
	d.svcTotals, d.svcCheckedFor = tot, want.Services
	return nil
}

// tooManyBackends returns an error wrapping ErrServiceCapacity when c
// has more backends than a frontend's entry counts.
func tooManyBackends(fe policy.ServiceFrontend, c svcCheck) error {
	if c.ok && len(c.want.backends) > maxBackendsPerFrontend {
		return fmt.Errorf("apply services: %s %v has %d backends, at most %d: %w", serviceName(c.src), fe, len(c.want.backends), maxBackendsPerFrontend, ErrServiceCapacity)
	}
	return nil
}

// checkService says whether and how lockstep translates fe with entry se
// (see checkServices).
func (d *Datapath) checkService(fe policy.ServiceFrontend, se *policy.ServiceEntry) svcCheck {
	key, ok := svcKey(fe)
	if !ok || se == nil {
		d.log.Warn("not translating a Service frontend lockstep cannot translate", "frontend", fe, "service", serviceName(se))
		return svcCheck{src: se}
	}
	w := svcWant{key: key, src: se, backends: se.Backends, affinity: affinitySeconds(se.AffinityTimeout), noLocal: se.NoLocalBackend && len(se.Backends) == 0}
	if se.External {
		w.mark = d.masqMark
	}
	is4 := fe.Addr.Unmap().Is4()
	mixed := false
	for _, b := range se.Backends {
		if b.Addr.Unmap().Is4() != is4 {
			mixed = true
		}
		if fe.Proto == policyapi.ProtoSCTP && b.Port != fe.Port {
			d.log.Info("leaving an SCTP frontend to kube-proxy: a backend listens on another port than the Service's", "frontend", fe, "service", serviceName(se))
			return svcCheck{src: se}
		}
	}
	if mixed {
		w.backends = nil
		for _, b := range se.Backends {
			if b.Addr.Unmap().Is4() == is4 {
				w.backends = append(w.backends, policy.ServiceBackend{Addr: b.Addr.Unmap(), Port: b.Port, Local: b.Local})
			}
		}
		d.log.Warn("ignoring Service backends of the other address family", "frontend", fe, "service", serviceName(se))
	}
	return svcCheck{src: se, want: w, ok: true}
}

func serviceName(se *policy.ServiceEntry) string {
	if se == nil {
		return ""
	}
	return se.Service
}

// affinitySeconds is the affinity timeout as svc_value holds it: whole
// seconds, rounded up, 0 for none.
func affinitySeconds(t time.Duration) uint32 {
	if t <= 0 {
		return 0
	}
	s := (t + time.Second - 1) / time.Second
	if s > time.Duration(^uint32(0)) {
		return ^uint32(0)
	}
	return uint32(s)
}

// writeServices writes parity q of lockstep_services and lockstep_backends
// as plan says, for the frontends of from, and makes every other frontend
// absent from parity q. When parity q was written from from itself, it
// holds exactly that already: nothing to look at.
func (d *Datapath) writeServices(from map[policy.ServiceFrontend]*policy.ServiceEntry, plan svcPlan, p, q int) error {
	m := &d.mirror
	if sameMap(m.svcsFrom[q], from) {
		return nil
	}
	m.svcsFrom[q] = nil
	write := d.writeServiceEntries
	d.stats.svcLooked = len(plan.all)
	if plan.incremental {
		write = d.writeChangedServices
		d.stats.svcLooked = len(plan.changed)
	}
	if err := write(plan, p, q); err != nil {
		return err
	}
	m.svcsFrom[q] = from
	return nil
}

// writeServiceEntries writes every frontend of plan.all into parity q and
// retires the frontends it does not have.
func (d *Datapath) writeServiceEntries(plan svcPlan, p, q int) error {
	m := &d.mirror
	if err := d.deleteOrphanBackends(); err != nil {
		return err
	}
	for _, w := range plan.all {
		if err := d.writeService(w, p, q); err != nil {
			return err
		}
	}
	if len(m.svcs) == len(plan.all) {
		return nil
	}
	for _, e := range m.svcs {
		if e.mark == m.mark {
			continue
		}
		if err := d.retireService(e, p, q); err != nil {
			return err
		}
	}
	return nil
}

// writeChangedServices writes the frontends of plan.changed into parity
// q, whose other frontends already are as they should be: those
// lockstep translates get their entries, the others are retired.
func (d *Datapath) writeChangedServices(plan svcPlan, p, q int) error {
	m := &d.mirror
	if err := d.deleteOrphanBackends(); err != nil {
		return err
	}
	for _, fe := range plan.changed {
		if c, ok := d.svcChecked[fe]; ok && c.ok {
			if err := d.writeService(c.want, p, q); err != nil {
				return err
			}
			continue
		}
		key, ok := svcKey(fe)
		if !ok {
			continue
		}
		if e := m.svcs[key]; e != nil {
			if err := d.retireService(e, p, q); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeService writes w into parity q, unless that parity already holds
// it; a frontend new to the maps gets an ID.
func (d *Datapath) writeService(w svcWant, p, q int) error {
	m := &d.mirror
	e := m.svcs[w.key]
	if e == nil {
		m.nextSvcID++
		e = &svcEntry{key: w.key, v: bpfmaps.SvcValue{ID: m.nextSvcID, Count: [2]uint16{bpfmaps.SvcAbsent, bpfmaps.SvcAbsent}}}
		e.vKnown[p] = true // absent: no entry, which packets read as absent
		m.svcs[w.key] = e
	}
	e.mark = m.mark
	if e.src[q] == w.src && e.src[q] != nil && e.vKnown[q] {
		return nil
	}
	layout := planSlots(e.slots[p], w.backends)
	if err := d.writeSlots(e, q, layout); err != nil {
		return err
	}
	count := uint16(len(layout))
	if w.noLocal {
		count = bpfmaps.SvcNoLocal
	}
	v := e.v
	frontendParity{count: count, affinity: w.affinity, mark: w.mark}.into(&v, q)
	if err := d.putService(e, v, q); err != nil {
		return err
	}
	e.src[q] = w.src
	return nil
}

// retireService makes e absent from parity q; once it is absent from both
// (packets of parity p did not see it either), its entry goes.
func (d *Datapath) retireService(e *svcEntry, p, q int) error {
	if err := d.writeSlots(e, q, nil); err != nil {
		return err
	}
	e.src[q] = nil
	if e.v.Count[p] == bpfmaps.SvcAbsent && e.vKnown[p] {
		return d.deleteService(e)
	}
	v := e.v
	frontendParity{count: bpfmaps.SvcAbsent}.into(&v, q)
	return d.putService(e, v, q)
}

// frontendParity is what a frontend's value holds for one parity: every
// field of bpfmaps.SvcValue but its ID, so that a parity is written and
// copied whole (the settler once copied all but a new field).
type frontendParity struct {
	count          uint16
	affinity, mark uint32
}

// parityOf returns parity p of v.
func parityOf(v bpfmaps.SvcValue, p int) frontendParity {
	return frontendParity{count: v.Count[p], affinity: v.Affinity[p], mark: v.Mark[p]}
}

// into writes s as parity p of v.
func (s frontendParity) into(v *bpfmaps.SvcValue, p int) {
	v.Count[p], v.Affinity[p], v.Mark[p] = s.count, s.affinity, s.mark
}

// deleteService deletes e's entry and whatever slots it still has. Only
// when no packet can read either parity of it.
func (d *Datapath) deleteService(e *svcEntry) error {
	for parity := range 2 {
		if err := d.writeSlots(e, parity, nil); err != nil {
			return err
		}
	}
	d.svcStats.entries++
	d.svcStats.svc++
	if err := d.services.Delete(e.key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		e.vKnown = [2]bool{}
		return fmt.Errorf("delete %s from %s: %w", e.key.String(), bpfmaps.ServicesMap, err)
	}
	delete(d.mirror.svcs, e.key)
	return nil
}

// putService writes v, whose copy of parity q changed, as e's entry.
func (d *Datapath) putService(e *svcEntry, v bpfmaps.SvcValue, q int) error {
	if v == e.v && e.vKnown[q] {
		return nil
	}
	d.svcStats.entries++
	d.svcStats.svc++
	if err := d.services.Put(e.key, v); err != nil {
		// The entry holds e.v or v: parity p's copy is the same in both.
		e.vKnown[q] = false
		return fmt.Errorf("write %s to %s: %w", e.key.String(), bpfmaps.ServicesMap, err)
	}
	e.v = v
	e.vKnown[q] = true
	return nil
}

// writeSlots makes the backend slots of e in parity hold exactly layout:
// the slots that differ are written, those beyond it deleted.
func (d *Datapath) writeSlots(e *svcEntry, parity int, layout []policy.ServiceBackend) error {
	cur := e.slots[parity]
	var keys []bpfmaps.BackendKey
	var vals []bpfmaps.BackendValue
	for i, b := range layout {
		if i < len(cur) && cur[i].state == slotHolds && cur[i].b == b {
			continue
		}
		keys = append(keys, bpfmaps.BackendKey{ID: e.v.ID, Slot: uint16(i), Parity: uint8(parity)})
		v := bpfmaps.BackendValue{Addr: bpfmaps.AddrFrom(b.Addr.Unmap()), Port: b.Port}
		if b.Local {
			v.Flags |= bpfmaps.BackendLocal
		}
		vals = append(vals, v)
	}
	var del []bpfmaps.BackendKey
	for i := len(layout); i < len(cur); i++ {
		if cur[i].state != slotEmpty {
			del = append(del, bpfmaps.BackendKey{ID: e.v.ID, Slot: uint16(i), Parity: uint8(parity)})
		}
	}
	if len(keys) == 0 && len(del) == 0 {
		return nil
	}
	next := make([]backendSlot, max(len(layout), len(cur)))
	for i := range next {
		switch {
		case i < len(layout):
			next[i] = backendSlot{b: layout[i], state: slotHolds}
		case i < len(cur):
			next[i] = cur[i]
		}
	}
	d.svcStats.entries += len(keys) + len(del)
	d.svcStats.svc += len(keys) + len(del)
	fail := func(err error) error {
		e.src[parity] = nil
		for i := range next {
			if next[i].state != slotEmpty || (i < len(cur) && cur[i].state != slotEmpty) {
				next[i].state = slotUnknown
			}
		}
		e.slots[parity] = next
		return fmt.Errorf("write backends of %s: %w", e.key.String(), err)
	}
	if err := putAll(d.backends, keys, vals); err != nil {
		return fail(err)
	}
	if err := deleteAll(d.backends, del); err != nil {
		return fail(err)
	}
	e.slots[parity] = next[:len(layout)]
	return nil
}

// planSlots returns the slots of the backends want, given the slots of the
// live parity: every backend that stays keeps its slot, new backends fill
// the slots of removed ones first, then follow; when fewer backends
// remain, the last ones move into the free slots, so the slots stay dense.
func planSlots(live []backendSlot, want []policy.ServiceBackend) []policy.ServiceBackend {
	if len(live) == 0 {
		return slices.Clone(want)
	}
	wanted := make(map[policy.ServiceBackend]bool, len(want))
	for _, b := range want {
		wanted[b] = true
	}
	out := make([]policy.ServiceBackend, 0, len(want))
	placed := make(map[policy.ServiceBackend]bool, len(want))
	var holes []int
	for i, s := range live {
		if s.state == slotHolds && wanted[s.b] && !placed[s.b] {
			out = append(out, s.b)
			placed[s.b] = true
			continue
		}
		out = append(out, policy.ServiceBackend{})
		holes = append(holes, i)
	}
	for _, b := range want {
		if placed[b] {
			continue
		}
		placed[b] = true
		if len(holes) > 0 {
			out[holes[0]] = b
			holes = holes[1:]
			continue
		}
		out = append(out, b)
	}
	// Close the remaining holes with the last slots.
	for len(holes) > 0 {
		last := len(out) - 1
		if holes[len(holes)-1] == last {
			holes = holes[:len(holes)-1]
		} else {
			out[holes[0]] = out[last]
			holes = holes[1:]
		}
		out = out[:last]
	}
	return out
}

// settleServices brings the idle parity of every frontend up to the live
// one, and deletes the frontends the live parity no longer has. Called
// with d.mu held, when no packet uses the idle parity.
func (d *Datapath) settleServices(live, idle int) error {
	if sameMap(d.mirror.svcsFrom[idle], d.mirror.svcsFrom[live]) {
		return nil
	}
	d.mirror.svcsFrom[idle] = nil
	var st applyStats
	d.svcStats = &st
	defer func() {
		d.settler.entries += st.entries
		d.svcStats = &d.stats
	}()
	var errs []error
	complete := true
	for _, e := range d.mirror.svcs {
		if !e.vKnown[live] {
			complete = false
			continue // the next Apply rewrites it
		}
		if e.v.Count[live] == bpfmaps.SvcAbsent {
			if err := d.deleteService(e); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if e.src[idle] != nil && e.src[idle] == e.src[live] && e.vKnown[idle] {
			continue
		}
		layout := make([]policy.ServiceBackend, 0, len(e.slots[live]))
		for _, s := range e.slots[live] {
			layout = append(layout, s.b)
		}
		if err := d.writeSlots(e, idle, layout); err != nil {
			errs = append(errs, err)
			continue
		}
		v := e.v
		parityOf(v, live).into(&v, idle)
		if err := d.putService(e, v, idle); err != nil {
			errs = append(errs, err)
			continue
		}
		e.src[idle] = e.src[live]
	}
	if len(errs) > 0 {
		d.log.Warn("bring idle Service backends up to date; the next apply will", "err", errs[0], "failed", len(errs))
		return errs[0]
	}
	if complete {
		d.mirror.svcsFrom[idle] = d.mirror.svcsFrom[live]
	}
	return nil
}

// deleteOrphanBackends deletes backend slots whose frontend ID has no
// entry (left by an agent that died between two writes). No packet can
// reach them.
func (d *Datapath) deleteOrphanBackends() error {
	m := &d.mirror
	if len(m.orphanSlots) == 0 {
		return nil
	}
	d.svcStats.entries += len(m.orphanSlots)
	d.svcStats.svc += len(m.orphanSlots)
	if err := deleteAll(d.backends, m.orphanSlots); err != nil {
		return fmt.Errorf("delete backends of no frontend from %s: %w", bpfmaps.BackendsMap, err)
	}
	m.orphanSlots = nil
	return nil
}

// adoptServices reads lockstep_services and lockstep_backends into the
// mirror (see adopt).
func (d *Datapath) adoptServices() error {
	m := &d.mirror
	m.svcs = make(map[bpfmaps.SvcKey]*svcEntry)
	byID := make(map[uint32]*svcEntry)
	var k bpfmaps.SvcKey
	var v bpfmaps.SvcValue
	it := d.services.Iterate()
	for it.Next(&k, &v) {
		e := &svcEntry{key: k, v: v, vKnown: [2]bool{true, true}}
		m.svcs[k] = e
		byID[v.ID] = e
		m.nextSvcID = max(m.nextSvcID, v.ID)
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read %s: %w", bpfmaps.ServicesMap, err)
	}
	var bk bpfmaps.BackendKey
	var bv bpfmaps.BackendValue
	it = d.backends.Iterate()
	for it.Next(&bk, &bv) {
		e := byID[bk.ID]
		if e == nil || bk.Parity > 1 {
			m.orphanSlots = append(m.orphanSlots, bk)
			continue
		}
		s := &e.slots[bk.Parity]
		for len(*s) <= int(bk.Slot) {
			*s = append(*s, backendSlot{})
		}
		b := policy.ServiceBackend{Addr: bv.Addr.Netip(), Port: bv.Port, Local: bv.Flags&bpfmaps.BackendLocal != 0}
		(*s)[bk.Slot] = backendSlot{b: b, state: slotHolds}
	}
	if err := it.Err(); err != nil {
		return fmt.Errorf("read %s: %w", bpfmaps.BackendsMap, err)
	}
	return nil
}
