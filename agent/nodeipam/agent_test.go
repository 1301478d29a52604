package nodeipam

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/endpoints"
	"lockstep.dev/lockstep/agent/persist"
	"lockstep.dev/lockstep/agent/store"
)

// node is the agent side of one node, in process: the store, the state
// file in dir and the endpoints service in Kubernetes mode. Tests drive
// ADDs on it directly; no CNI plugin or network namespace is involved.
type node struct {
	dir    string
	st     *store.Store
	db     *persist.DB
	svc    *endpoints.Service
	closed sync.Once
}

// openNode starts the agent side on the state directory dir, restoring
// whatever an earlier openNode left there, as an agent restart does.
func openNode(t *testing.T, dir string) *node {
	t.Helper()
	db, err := persist.Open(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	st, err := store.NewDurable(db)
	if err != nil {
		t.Fatal(err)
	}
	svc, err := endpoints.New(st, db, endpoints.Config{PoolsFromStore: true, Logger: quiet()})
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	n := &node{dir: dir, st: st, db: db, svc: svc}
	t.Cleanup(n.close)
	return n
}

// close closes the state file, as a crash would leave it.
func (n *node) close() { n.closed.Do(func() { n.db.Close() }) }

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// pod names a pod for an ADD.
type pod struct{ namespace, name, uid string }

// add runs a confirmed ADD for p's sandbox container cid.
func (n *node) add(t *testing.T, cid string, p pod) (netip.Addr, error) {
	t.Helper()
	att := api.Attachment{ContainerID: cid, IfName: "eth0"}
	resp, err := n.svc.Add(context.Background(), api.AddRequest{
		Attachment: att, Netns: "/run/netns/" + cid,
		Pod: api.PodRef{Namespace: p.namespace, Name: p.name, UID: p.uid},
	})
	if err != nil {
		return netip.Addr{}, err
	}
	if err := n.svc.Confirm(context.Background(), api.OpRequest{Attachment: att, OpID: resp.OpID}); err != nil {
		t.Fatalf("confirm %s: %v", cid, err)
	}
	return resp.Addresses[0].Address.Addr(), nil
}

// mustAdd is add that must succeed.
func (n *node) mustAdd(t *testing.T, cid string, p pod) netip.Addr {
	t.Helper()
	a, err := n.add(t, cid, p)
	if err != nil {
		t.Fatalf("ADD %s for %s/%s: %v", cid, p.namespace, p.name, err)
	}
	return a
}

// del runs a DEL of cid's sandbox.
func (n *node) del(t *testing.T, cid string) {
	t.Helper()
	if _, err := n.svc.Del(context.Background(), api.Attachment{ContainerID: cid, IfName: "eth0"}); err != nil {
		t.Fatalf("DEL %s: %v", cid, err)
	}
}

// block returns the store's block called name, or nil.
func (n *node) block(t *testing.T, name string) *store.Block {
	t.Helper()
	b, err := store.BlockByName(n.st.ReadTxn(), nil, name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// pool returns the store's pool called name, or nil.
func (n *node) pool(t *testing.T, name string) *store.Pool {
	t.Helper()
	p, err := store.PoolByName(n.st.ReadTxn(), nil, name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// allocated returns every allocated address and who holds it.
func (n *node) allocated(t *testing.T) map[netip.Addr]string {
	t.Helper()
	eps, err := store.Endpoints(n.st.ReadTxn(), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[netip.Addr]string{}
	for _, e := range eps {
		for _, a := range e.Addresses {
			if other, dup := out[a.Addr]; dup {
				t.Fatalf("address %s held twice: by %s and %s", a.Addr, other, e.Pod.UID)
			}
			out[a.Addr] = e.Pod.UID
		}
	}
	return out
}

// countIn counts the allocations inside cidr.
func (n *node) countIn(t *testing.T, cidr string) uint64 {
	t.Helper()
	c, err := endpoints.CountIn(n.st.ReadTxn(), netip.MustParsePrefix(cidr))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func (p pod) String() string { return fmt.Sprintf("%s/%s", p.namespace, p.name) }
