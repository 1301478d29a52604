//go:build linux

package datapath

import (
	"errors"
	"fmt"
	"sync"

	"github.com/cilium/ebpf"
)

// settler brings the idle parity up to the live state in the background,
// so that the next Apply writes only what changes then. After a flip, the
// idle parity's inner maps still hold the rules of the generation before;
// an Apply would rewrite them first, doubling its work. The settler waits
// for an RCU grace period after the flip, so that no packet that read the
// previous generation is still running, then (if no Apply came in
// between) rewrites those inner maps in place under Datapath.mu.
//
// The grace period is that of a private map-in-map: the kernel waits for
// every running BPF program to finish after each update of one from user
// space. It costs the settler's goroutine milliseconds of sleep.
//
// The settler also records the last generation a grace period has passed
// for (quiet). Apply writes the idle parity only once quiet is the live
// generation (waitQuiescent): a packet that read the generation before
// the last flip may still be running and reading the idle parity, and must
// not see it change. Edits further apart than a grace period (about 13 ms
// here) never wait; an Apply right after another waits for the rest of
// the grace period.
type settler struct {
	kick    chan struct{} // capacity 1: a flip happened
	done    chan struct{} // closed when the goroutine returns
	gp      *ebpf.Map     // array of maps whose updates wait for a grace period
	gpInner *ebpf.Map
	closed  bool       // under Datapath.mu: no more kicks
	quiet   uint32     // under Datapath.mu: a grace period has passed since this generation's flip
	failed  bool       // under Datapath.mu: the last wait for a grace period failed
	cond    *sync.Cond // on Datapath.mu: quiet, failed or closed changed
	rounds  int        // settle rounds done, under Datapath.mu (tests)
	entries int        // inner map entries the rounds wrote, under Datapath.mu
	err     error      // the last round's error, under Datapath.mu
	// ctFlushes and ctFlushed count the conntrack flushes of removed
	// endpoints done and the entries they deleted, under Datapath.mu.
	ctFlushes, ctFlushed int
	// graceWait waits for a grace period; tests replace it before the
	// first Apply to hold the settler.
	graceWait func() error
}

// startSettler creates the grace-period map and starts the goroutine.
func (d *Datapath) startSettler() error {
	inner, err := ebpf.NewMap(d.innerSpec)
	if err != nil {
		return fmt.Errorf("create grace period inner map: %w", err)
	}
	gp, err := ebpf.NewMap(&ebpf.MapSpec{
		Name:       "lockstep_gp",
		Type:       ebpf.ArrayOfMaps,
		KeySize:    4,
		ValueSize:  4,
		MaxEntries: 1,
		InnerMap:   d.innerSpec.Copy(),
	})
	if err != nil {
		inner.Close()
		return fmt.Errorf("create grace period map: %w", err)
	}
	d.settler = settler{
		kick: make(chan struct{}, 1), done: make(chan struct{}), gp: gp, gpInner: inner,
		quiet: d.mirror.gen, cond: sync.NewCond(&d.mu),
	}
	// Updating a map-in-map returns once every BPF program running before
	// the update has finished.
	d.settler.graceWait = func() error { return gp.Put(uint32(0), uint32(inner.FD())) }
	go d.settleLoop(d.settler.kick, d.settler.done)
	return nil
}

// kickSettler tells the settler a flip happened. Called with d.mu held.
func (d *Datapath) kickSettler() {
	if d.settler.kick == nil || d.settler.closed {
		return
	}
	select {
	case d.settler.kick <- struct{}{}:
	default: // a round is pending already; it reads the generation anew
	}
}

// stopSettler ends the goroutine and waits for it. Called without d.mu.
func (d *Datapath) stopSettler() {
	d.mu.Lock()
	s := &d.settler
	if s.kick == nil || s.closed {
		d.mu.Unlock()
		return
	}
	s.closed = true
	close(s.kick)
	s.cond.Broadcast()
	d.mu.Unlock()
	<-s.done
	// A conntrack flush still queued would be lost: the next agent no
	// longer knows these endpoints. Do it now, after the grace period.
	d.mu.Lock()
	gone, wait := d.takeCTGone(), s.graceWait
	d.mu.Unlock()
	if len(gone) > 0 {
		err := wait()
		if err == nil {
			_, err = d.flushConntrack(gone)
		}
		if err != nil {
			d.log.Warn("delete conntrack entries of removed endpoints at close; they expire on their own", "err", err, "endpoints", len(gone))
		}
	}
	s.gp.Close()
	s.gpInner.Close()
}

func (d *Datapath) settleLoop(kick <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	for range kick {
		d.mu.Lock()
		gen, wait := d.mirror.gen, d.settler.graceWait
		settled := gen == d.settler.quiet && !d.settler.failed
		if settled && len(d.ctGone) == 0 {
			// A kick for a generation already settled (a waiting
			// Apply's, or one the round before handled): nothing to do.
			d.mu.Unlock()
			continue
		}
		d.mu.Unlock()
		err := wait()
		d.mu.Lock()
		s := &d.settler
		s.failed = err != nil
		var gone map[uint32]struct{}
		switch {
		case err != nil:
			s.err = fmt.Errorf("wait for a grace period: %w", err)
		default:
			if !settled {
				s.quiet = gen
				if !s.closed && d.mirror.gen == gen {
					s.err = errors.Join(d.settleIdle(), d.settleServices(int(gen&1), int(gen&1)^1))
					s.rounds++
				}
			}
			// No packet that saw a removed endpoint still runs: none
			// can make an entry for it after the flush.
			gone = d.takeCTGone()
		}
		s.cond.Broadcast()
		d.mu.Unlock()
		if len(gone) > 0 {
			d.flushRemovedCT(gone)
		}
	}
}

// flushRemovedCT deletes the conntrack entries of the ifindexes in gone,
// outside d.mu; on failure they are queued again for the next round.
func (d *Datapath) flushRemovedCT(gone map[uint32]struct{}) {
	n, err := d.flushConntrack(gone)
	d.mu.Lock()
	defer d.mu.Unlock()
	s := &d.settler
	if err != nil {
		d.log.Warn("delete conntrack entries of removed endpoints; retrying after the next apply", "err", err, "endpoints", len(gone))
		for idx := range gone {
			if d.isAttachedIndex(idx) {
				continue // attached again meanwhile: its entries are its own
			}
			if d.ctGone == nil {
				d.ctGone = map[uint32]struct{}{}
			}
			d.ctGone[idx] = struct{}{}
		}
		return
	}
	s.ctFlushes++
	s.ctFlushed += n
	s.cond.Broadcast()
}

// isAttachedIndex reports whether an attached endpoint has ifindex idx.
// Called with d.mu held.
func (d *Datapath) isAttachedIndex(idx uint32) bool {
	for _, i := range d.attached {
		if uint32(i) == idx {
			return true
		}
	}
	return false
}

// waitQuiescent returns once a grace period has passed since the last
// flip, so that no packet still reads the idle parity Apply is about to
// write. Called with d.mu held; it releases d.mu while it waits. Without a
// running settler (closed, or its last wait failed) it waits itself.
func (d *Datapath) waitQuiescent() error {
	s := &d.settler
	if s.kick == nil || s.closed {
		return fmt.Errorf("apply policy: %w", ErrClosed)
	}
	for s.quiet != d.mirror.gen {
		if s.closed {
			return fmt.Errorf("apply policy: %w", ErrClosed)
		}
		if s.failed {
			if err := s.graceWait(); err != nil {
				return fmt.Errorf("apply policy: wait for packets of the previous generation: %w", err)
			}
			s.quiet, s.failed = d.mirror.gen, false
			return nil
		}
		// A generation no flip announced (one read back by adopt) gets
		// a round of its own; a round already pending reads gen anew.
		d.kickSettler()
		s.cond.Wait()
	}
	return nil
}

// settleIdle rewrites in place the idle parity's inner maps whose rules
// differ from the live parity's. Maps it cannot rewrite in place (none
// yet, adopted, too small) are left to the next Apply, which replaces
// them. Called with d.mu held, when no packet uses the idle parity.
func (d *Datapath) settleIdle() error {
	m := &d.mirror
	live := int(m.gen & 1)
	idle := live ^ 1
	var errs []error
	for _, e := range m.eps {
		ep := e.src[live]
		if ep == nil || e.src[idle] == ep {
			continue
		}
		im := e.inner[idle]
		if im == nil {
			if len(ep.Rules) == 0 {
				e.src[idle] = ep
			}
			continue
		}
		if !im.known || !fits(im.capacity, ruleEntries(ep.Rules)) {
			continue
		}
		n, err := updateInner(im, ep.Rules, ep.Origins, &d.rules)
		d.settler.entries += n
		if err != nil {
			e.src[idle] = nil
			errs = append(errs, fmt.Errorf("settle rules of ifindex %d: %w", e.ifindex, err))
			continue
		}
		e.src[idle] = ep
	}
	if len(errs) > 0 {
		d.log.Warn("bring idle policy maps up to date; the next apply will", "err", errs[0], "failed", len(errs))
		return errs[0]
	}
	return nil
}
