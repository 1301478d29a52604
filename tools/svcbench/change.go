//go:build linux

package main

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"lockstep.dev/lockstep/agent/datapath"
	"lockstep.dev/lockstep/agent/enforcer"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/store"
	"lockstep.dev/lockstep/probe/nodesim"
	"lockstep.dev/lockstep/test/benchcluster"
	"lockstep.dev/lockstep/test/benchkit"
)

// changePause is how long the spaced changes wait after each Sync: longer
// than the RCU grace period an Apply waits for after the previous flip
// (about 13 ms here), so that each change is timed as one that comes
// alone, the common case.
const changePause = 50 * time.Millisecond

// changeResult is what the Service change benchmark measured.
type changeResult struct {
	changes   int
	firstSync time.Duration
	// spaced are the changes changePause apart, end to end (store write →
	// enforcer.Sync returned), with the write transaction (until its
	// commit) and Sync's phases; backToBack follow each other at once.
	spaced, backToBack   []time.Duration
	write                []time.Duration
	feed, compile, apply []time.Duration
	skipped              int
	frontends, backends  int
	policies, pods       int
}

// benchServiceChange loads the synthetic cluster with its Services into a
// store, attaches the datapath to the local pods' veths in a throwaway
// netns (bpffs on a private mount) and times EndpointSlice changes one by
// one through the enforcer, as the agent applies those the API server
// sends: each replaces one backend of one Service.
func benchServiceChange(ctx context.Context, changes int) (res *changeResult, err error) {
	c := benchcluster.New()
	c.AddServices()
	st, err := store.New()
	if err != nil {
		return nil, err
	}
	if err := benchcluster.LoadStore(st, c); err != nil {
		return nil, err
	}
	node, err := nodesim.Create(nodesim.Name(nsPrefix))
	if err != nil {
		return nil, err
	}
	defer func() {
		if derr := nodesim.Delete(node); derr != nil && err == nil {
			err = derr
		}
	}()
	work, err := os.MkdirTemp("", "svcbench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	bpfRoot := filepath.Join(work, "bpf")
	if err := nodesim.MountBPF(bpfRoot); err != nil {
		return nil, err
	}
	defer func() {
		if uerr := nodesim.UnmountBPF(bpfRoot); uerr != nil && err == nil {
			err = uerr
		}
	}()

	res = &changeResult{changes: changes, policies: len(c.Policies), pods: len(c.Pods)}
	err = node.Do(func(ns.NetNS) error {
		// Every call below runs on this locked thread, inside node: the
		// veths, Attach's filters and the enforcer's Sync all see it.
		if err := benchcluster.CreateVeths(); err != nil {
			return err
		}
		dp, err := datapath.Load(datapath.Options{PinRoot: filepath.Join(bpfRoot, "lockstep")})
		if err != nil {
			return err
		}
		defer dp.Close()
		enf := enforcer.New(st, dp, nil)
		start := time.Now()
		if err := enf.Sync(ctx); err != nil {
			return fmt.Errorf("first sync: %w", err)
		}
		res.firstSync = time.Since(start)
		svcs := enf.Services()
		res.frontends, res.backends = svcs.Frontends, svcs.Backends
		if want := len(c.Services); svcs.Frontends != want || svcs.Backends != want*benchcluster.Replicas {
			return fmt.Errorf("first sync applied %d frontends and %d backends, want %d and %d", svcs.Frontends, svcs.Backends, want, want*benchcluster.Replicas)
		}
		logf("  first sync (attach %d endpoints, %d policies, %d frontends): %s", benchcluster.LocalEndpoints, len(c.Policies), svcs.Frontends, benchkit.FmtDur(res.firstSync))

		var ph enforcer.Phases
		enf.OnPhases(func(p enforcer.Phases) { ph = p })
		ch := newSliceChanger(c)
		prog := benchkit.NewProgress("Service changes, spaced", changes, logf)
		for range changes {
			ph = enforcer.Phases{}
			var written time.Time
			begin := time.Now()
			d, err := benchcluster.TimeWrite(ctx, st, enf, func(txn *store.Txn) error {
				err := store.UpsertEndpointSlice(txn, ch.next())
				written = time.Now()
				return err
			})
			if err != nil {
				return fmt.Errorf("Service change %d: %w", ch.v, err)
			}
			res.spaced = append(res.spaced, d)
			res.write = append(res.write, written.Sub(begin))
			res.feed, res.compile, res.apply = append(res.feed, ph.Feed), append(res.compile, ph.Compile), append(res.apply, ph.Apply)
			if ph.Skipped {
				res.skipped++
			}
			prog.Step()
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(changePause):
			}
		}
		prog = benchkit.NewProgress("Service changes, back to back", changes, logf)
		for range changes {
			d, err := benchcluster.TimeWrite(ctx, st, enf, func(txn *store.Txn) error {
				return store.UpsertEndpointSlice(txn, ch.next())
			})
			if err != nil {
				return fmt.Errorf("Service change %d: %w", ch.v, err)
			}
			res.backToBack = append(res.backToBack, d)
			prog.Step()
		}
		if got := enf.Services(); got.Frontends != res.frontends || got.Backends != res.backends {
			return fmt.Errorf("after the changes %d frontends and %d backends are applied, want %d and %d", got.Frontends, got.Backends, res.frontends, res.backends)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// sliceChanger hands out the EndpointSlice changes of a run: change v
// replaces one backend of Service v*37 mod 1000, so that successive
// changes touch Services spread over the cluster, each a backend no
// earlier change used.
type sliceChanger struct {
	v   int
	cur map[int][]netip.Addr // Service index → its slice's current addresses
	c   *benchcluster.Cluster
}

func newSliceChanger(c *benchcluster.Cluster) *sliceChanger {
	return &sliceChanger{cur: map[int][]netip.Addr{}, c: c}
}

func (s *sliceChanger) next() *policyapi.EndpointSlice {
	n := (s.v * 37) % len(s.c.Services)
	cur, ok := s.cur[n]
	if !ok {
		for k := range benchcluster.Replicas {
			cur = append(cur, netip.MustParseAddr(s.c.Pods[n*benchcluster.Replicas+k].Status.PodIP))
		}
		s.cur[n] = cur
	}
	sl := benchcluster.ReplacedBackend(n, s.v, cur)
	s.v++
	return sl
}
