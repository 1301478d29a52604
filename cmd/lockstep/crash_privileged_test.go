//go:build linux

package main

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/vishvananda/netlink"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/probe/nodesim"
)

// TestPrivilegedAgentCrashDuringBurst SIGKILLs the agent in the middle of a
// burst of concurrent ADDs and DELs, restarts it, and shows that no address
// is held by two live pods and that, after the runtime's GC, none leaked.
func TestPrivilegedAgentCrashDuringBurst(t *testing.T) {
	node := newNode(t, nodesim.NodeOptions{Pools: []string{"10.244.0.0/24"}})
	ctx := ctxT(t)

	const workers, podsPerWorker = 8, 4
	type pod struct {
		id    string
		netns ns.NetNS
		live  bool // the runtime believes the pod has its network
		// delPending: a DEL failed. The plugin unwires the pod before it
		// asks the agent to release its address, so the pod may have lost
		// its interface already; the runtime retries DEL before anything
		// else, as the CNI spec asks.
		delPending bool
		addr       netip.Addr
	}
	pods := make([][]*pod, workers)
	for w := range pods {
		for i := range podsPerWorker {
			pods[w] = append(pods[w], &pod{id: fmt.Sprintf("crash-%d-%d", w, i), netns: newPod(t)})
		}
	}

	var (
		wg       sync.WaitGroup
		stop     atomic.Bool
		addsOK   atomic.Int64
		delsOK   atomic.Int64
		failures atomic.Int64
	)
	// Each worker behaves like a runtime: ADD; on failure DEL (as the CNI
	// spec asks); DEL a pod the next time round, so ADDs and DELs
	// interleave; a pod whose DEL failed gets DEL again, never ADD.
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 0; !stop.Load(); round++ {
				p := pods[w][round%podsPerWorker]
				rt := podRuntime(p.id, p.netns)
				if p.live || p.delPending {
					p.live = false
					if err := node.Del(ctx, rt); err == nil {
						p.delPending, p.addr = false, netip.Addr{}
						delsOK.Add(1)
					} else {
						p.delPending = true
						failures.Add(1)
					}
					continue
				}
				res, err := node.Add(ctx, rt)
				if err != nil {
					failures.Add(1)
					// May fail too while the agent is down: then it is
					// retried, and GC covers what is left at the end.
					p.delPending = node.Del(ctx, rt) != nil
					continue
				}
				addsOK.Add(1)
				p.live = true
				p.addr, _ = podAddrs(t, res)
			}
		}()
	}

	// Three crashes, each in the middle of the churn.
	var before int64
	for range 3 {
		time.Sleep(300 * time.Millisecond)
		before = addsOK.Load()
		if err := node.KillAgent(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
		if err := node.StartAgent(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Churn on after the last crash until it has ADDed and DELed (a
	// loaded machine may need longer than an idle one), within a bound.
	time.Sleep(300 * time.Millisecond)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline) && (addsOK.Load() == before || delsOK.Load() == 0); {
		time.Sleep(50 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	t.Logf("%d successful ADDs, %d DELs, %d failed calls", addsOK.Load(), delsOK.Load(), failures.Load())
	if before == 0 || addsOK.Load() == before || delsOK.Load() == 0 {
		t.Fatal("the burst did not churn on both sides of the crashes")
	}

	// No address is held by two pods the runtime believes live, neither in
	// the ADD results nor in the pods' own namespaces.
	owner := map[netip.Addr]string{}
	var valid []types.GCAttachment
	client := api.NewClient(node.Socket, 0)
	for _, ws := range pods {
		for _, p := range ws {
			if !p.live {
				continue
			}
			valid = append(valid, types.GCAttachment{ContainerID: p.id, IfName: "eth0"})
			if other, dup := owner[p.addr]; dup {
				t.Errorf("%s handed to both %s and %s", p.addr, other, p.id)
			}
			owner[p.addr] = p.id
			if got := podIPv4(t, p.netns); got != p.addr {
				t.Errorf("pod %s has %s in its namespace, ADD said %s", p.id, got, p.addr)
			}
			ep, err := client.Get(ctx, api.Attachment{ContainerID: p.id, IfName: "eth0"})
			if err != nil {
				t.Errorf("agent lost live pod %s after restart: %v", p.id, err)
			} else if ep.Addresses[0].Address.Addr() != p.addr {
				t.Errorf("agent records %s for %s, pod has %s", ep.Addresses[0].Address, p.id, p.addr)
			}
		}
	}

	// After GC with the runtime's view (pods whose DEL is still pending are
	// not valid), the agent holds exactly the live pods' addresses and the
	// node exactly their links.
	if err := node.GC(ctx, valid); err != nil {
		t.Fatalf("GC: %v", err)
	}
	st, err := client.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if used := st.Pools[0].Used; used != uint64(len(valid)) {
		t.Errorf("after GC the agent holds %d addresses for %d live pods: leak", used, len(valid))
	}
	if links := hostLinks(t, node.NS); len(links) != len(valid) {
		t.Errorf("after GC %d host links for %d live pods", len(links), len(valid))
	}
	t.Logf("%d live pods, all addresses unique, no leaks", len(valid))
}

func podIPv4(t *testing.T, pod ns.NetNS) netip.Addr {
	t.Helper()
	var addr netip.Addr
	err := pod.Do(func(ns.NetNS) error {
		link, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		addrs, err := netlink.AddrList(link, netlink.FAMILY_V4)
		if len(addrs) > 0 {
			addr, _ = netip.AddrFromSlice(addrs[0].IP.To4())
		}
		return err
	})
	if err != nil {
		t.Fatalf("read pod address: %v", err)
	}
	return addr
}
