//go:build linux

package probe

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"lockstep.dev/lockstep/probe/nodesim"
)

// frontend is a Service reached at its ClusterIP of the probed family.
type frontend struct {
	svc  Service
	addr netip.Addr
}

// serviceFrontends picks each Service's ClusterIP of family. A Service
// without one is not probed, with a warning.
func serviceFrontends(svcs []Service, family string, progress func(string, ...any)) ([]frontend, []ServiceInfo) {
	i := 0
	if family == IPv6 {
		i = 1
	}
	var fronts []frontend
	var infos []ServiceInfo
	for _, s := range svcs {
		addr := s.ClusterIPs[i]
		if !addr.IsValid() {
			progress("warning: service %s has no %s ClusterIP: not probed (give it spec.clusterIPs of both families)", s.Key(), family)
			continue
		}
		if s.Affinity {
			progress("warning: service %s has sessionAffinity ClientIP: each pod's connections all reach one backend, so a partly allowed Service shows . or X per pod, not ~", s.Key())
		}
		fronts = append(fronts, frontend{svc: s, addr: addr})
		infos = append(infos, ServiceInfo{Namespace: s.Namespace, Name: s.Name, IP: addr.String(), Ports: slices.Clone(s.Ports)})
	}
	return fronts, infos
}

// svcJob is the probe of one frontend from one pod.
type svcJob struct {
	from *pod
	to   frontend
	port Port
}

// planServices lists a probe from every pod to every port of every
// Service, a pod's own Services included (hairpin).
func planServices(pods []*pod, fronts []frontend) []svcJob {
	var jobs []svcJob
	for _, from := range pods {
		for _, to := range fronts {
			for _, port := range to.svc.Ports {
				jobs = append(jobs, svcJob{from: from, to: to, port: port})
			}
		}
	}
	return jobs
}

// runServiceProbes makes the probes through Services, with at most
// workers frontends probed and at most workers connection attempts in
// flight at once.
func runServiceProbes(ctx context.Context, jobs []svcJob, workers, attempts int, timeout time.Duration) []ServiceResult {
	results := make([]ServiceResult, len(jobs))
	slots := make(chan struct{}, workers)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, len(jobs)) {
		wg.Go(func() {
			for i := range next {
				results[i] = probeService(ctx, jobs[i], slots, attempts, timeout)
			}
		})
	}
	for i := range jobs {
		select {
		case next <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
	return results
}

// probeService makes up to attempts connections from j.from to the
// frontend, all at once as slots allow, each a new connection the
// dataplane sends to a backend of its choice. It stops early once one was
// answered and one was not: the outcome is partial whatever the others
// find. Attempts cut short that way, or that could not be made, are not
// counted.
func probeService(ctx context.Context, j svcJob, slots chan struct{}, attempts int, timeout time.Duration) ServiceResult {
	r := ServiceResult{From: j.from.Key(), Service: j.to.svc.Key(), Port: j.port.Port, Protocol: j.port.Protocol}
	dst := netip.AddrPortFrom(j.to.addr, j.port.Port)
	cellCtx, settle := context.WithCancel(ctx)
	defer settle()
	var (
		mu       sync.Mutex
		wg       sync.WaitGroup
		backends = map[string]bool{}
		firstErr error
	)
	for range attempts {
		wg.Go(func() {
			select {
			case slots <- struct{}{}:
			case <-cellCtx.Done():
				return
			}
			defer func() { <-slots }()
			if cellCtx.Err() != nil {
				return
			}
			v, err := dial(cellCtx, j.from.netns, dst, j.port.Protocol, timeout)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case cellCtx.Err() != nil:
				// Settled meanwhile, or the run was cancelled: proves nothing.
			case err != nil:
				if firstErr == nil {
					firstErr = err
				}
			case v.Answered:
				r.Answered++
				if v.By != "" {
					backends[v.By] = true
				}
			case v.Refused:
				r.Refused++
			default:
				r.Dropped++
			}
			if r.Answered > 0 && r.Refused+r.Dropped > 0 {
				settle()
			}
		})
	}
	wg.Wait()
	r.Attempts = r.Answered + r.Refused + r.Dropped
	r.Outcome = decide(r.Answered, r.Refused, r.Dropped)
	for b := range backends {
		r.Backends = append(r.Backends, b)
	}
	slices.SortFunc(r.Backends, comparePodKeys)
	if firstErr != nil {
		r.Error = firstErr.Error()
	}
	return r
}

// unlimitICMP switches off the node's per-destination rate limit of the
// ICMP errors it sends (net.ipv4.icmp_ratelimit, net.ipv6.icmp.ratelimit,
// both per namespace): with it, a pod's burst of UDP attempts at a Service
// without endpoints got 6 refusals and then one a second, the rest timing
// out like drops, so whether a cell showed 'R' depended on how many cells
// before it had been refused. The eBPF dataplane builds its refusals
// itself and was never limited. A real node keeps the limit: there, a
// burst of UDP to a Service without endpoints is partly dropped.
func unlimitICMP(node *nodesim.Node) error {
	for _, key := range []string{"net/ipv4/icmp_ratelimit", "net/ipv6/icmp/ratelimit"} {
		if err := nodesim.Sysctl(node.NS, key, "0"); err != nil {
			return fmt.Errorf("lift the node's ICMP rate limit: %w", err)
		}
	}
	return nil
}

// outLink is the node's end of the link to the outside in a probe
// through Services.
const outLink = "lsprobe-out"

// The link to the outside, in documentation ranges: nothing a pod or a
// manifest uses.
var (
	outNode = []netip.Prefix{netip.MustParsePrefix("192.0.2.1/30"), netip.MustParsePrefix("2001:db8:ffff::1/64")}
	outFar  = []netip.Prefix{netip.MustParsePrefix("192.0.2.2/30"), netip.MustParsePrefix("2001:db8:ffff::2/64")}
)

// routeOut gives the node default routes of both families to a namespace
// that plays the outside and drops what it is sent (it forwards nothing
// and answers only for its own address), as a real node has a default
// route. A packet to a ClusterIP that nothing translates then leaves the
// node and is lost, as on a real node, instead of being answered with
// "network unreachable"; and the iptables dataplane refuses a Service
// without endpoints in FORWARD, which only a routed packet reaches. The
// namespace is added to cleanup as soon as it exists.
func routeOut(node *nodesim.Node, cleanup *[]func() error) error {
	far, err := nodesim.Create(nodesim.Name(NSPrefix))
	if err != nil {
		return err
	}
	*cleanup = append(*cleanup, func() error { return nodesim.Delete(far) })
	if err := nodesim.ConnectNetwork(node.NS, far, nodesim.Network{NodeIf: outLink, NodeAddrs: outNode, FarAddrs: outFar}); err != nil {
		return err
	}
	err = node.NS.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName(outLink)
		if err != nil {
			return err
		}
		for i, dst := range []string{"0.0.0.0/0", "::/0"} {
			_, ipnet, err := net.ParseCIDR(dst)
			if err != nil {
				return err
			}
			r := &netlink.Route{LinkIndex: link.Attrs().Index, Dst: ipnet, Gw: outFar[i].Addr().AsSlice()}
			if err := netlink.RouteAdd(r); err != nil {
				return fmt.Errorf("route %s via %s: %w", dst, outFar[i].Addr(), err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("route the node's default to the outside: %w", err)
	}
	return nil
}
