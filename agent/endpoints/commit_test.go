package endpoints

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-memdb"
	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/persist"
	"lockstep.dev/lockstep/agent/store"
)

// heldDisk is a state file that counts its commits and holds every one
// until released, so that the writes arriving meanwhile queue up into
// the next batch. refuse, when set, may refuse a transaction before
// anything is written (as bbolt refuses a record it cannot store).
type heldDisk struct {
	inner   store.Persister
	entered chan struct{}
	hold    chan struct{}
	refuse  func(memdb.Changes) error
	calls   atomic.Int32 // Persists called
	wrote   atomic.Int32 // Persists that wrote the file
}

func newHeldDisk(inner store.Persister) *heldDisk {
	return &heldDisk{inner: inner, entered: make(chan struct{}, 64), hold: make(chan struct{})}
}

func (d *heldDisk) Persist(changes memdb.Changes) (bool, error) {
	d.calls.Add(1)
	d.entered <- struct{}{}
	<-d.hold
	if d.refuse != nil {
		if err := d.refuse(changes); err != nil {
			return false, err
		}
	}
	wrote, err := d.inner.Persist(changes)
	if wrote {
		d.wrote.Add(1)
	}
	return wrote, err
}

// waitEntered waits until a commit has reached the disk.
func (d *heldDisk) waitEntered(t *testing.T) {
	t.Helper()
	select {
	case <-d.entered:
	case <-time.After(5 * time.Second):
		t.Fatal("no write reached the disk")
	}
}

// waitQueued waits until n writes are queued for the committer.
func waitQueued(t *testing.T, s *Service, n int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		s.queueMu.Lock()
		queued := len(s.queue)
		s.queueMu.Unlock()
		if queued >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d writes queued, want %d", queued, n)
		}
	}
}

// waitIdle waits until the committer has answered everything.
func waitIdle(t *testing.T, s *Service) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		s.queueMu.Lock()
		busy := s.committing
		s.queueMu.Unlock()
		if !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the committer is still busy")
		}
	}
}

// holdFirstWrite starts an ADD of att(0) and waits until it is held in
// the disk, so that the writes that follow queue into one batch.
func holdFirstWrite(t *testing.T, f *fixture, d *heldDisk) <-chan error {
	t.Helper()
	first := make(chan error, 1)
	go func() {
		_, err := f.svc.Add(ctx, api.AddRequest{Attachment: att(0), Netns: "/x"})
		first <- err
	}()
	d.waitEntered(t)
	return first
}

// TestConcurrentAddsShareOneCommit: ADDs that arrive while a write is in
// the disk are written together, in one commit, and each is answered
// with its own, unique, durable addresses.
func TestConcurrentAddsShareOneCommit(t *testing.T) {
	const n = 32
	dir := t.TempDir()
	f := newFixture(t, dir, Config{}, "10.0.0.0/24", "fd00::/120")
	d := newHeldDisk(f.db)
	f.disk.set(d)
	first := holdFirstWrite(t, f, d)

	type result struct {
		resp *api.AddResponse
		err  error
	}
	results := make([]chan result, n)
	for i := range results {
		results[i] = make(chan result, 1)
		go func() {
			resp, err := f.svc.Add(ctx, api.AddRequest{Attachment: att(i + 1), Netns: "/x"})
			results[i] <- result{resp, err}
		}()
	}
	waitQueued(t, f.svc, n)
	close(d.hold)
	if err := <-first; err != nil {
		t.Fatalf("the held ADD: %v", err)
	}
	seen := map[netip.Addr]int{}
	for i, ch := range results {
		r := <-ch
		if r.err != nil {
			t.Errorf("ADD %d: %v", i+1, r.err)
			continue
		}
		if len(r.resp.Addresses) != 2 {
			t.Errorf("ADD %d: addresses %v, want one per family", i+1, r.resp.Addresses)
		}
		for _, a := range r.resp.Addresses {
			if other, dup := seen[a.Address.Addr()]; dup {
				t.Errorf("ADDs %d and %d were both given %s", other, i+1, a.Address.Addr())
			}
			seen[a.Address.Addr()] = i + 1
		}
		if err := f.svc.Confirm(ctx, api.OpRequest{Attachment: att(i + 1), OpID: r.resp.OpID}); err != nil {
			t.Errorf("confirm %d: %v", i+1, err)
		}
	}
	// The held ADD's commit, then one for the n queued behind it; the
	// confirms write nothing durable.
	if got := d.wrote.Load(); got != 2 {
		t.Errorf("%d ADDs were written in %d commits, want 2 (the held one, then all the others)", n+1, got)
	}
	eps, err := f.db.LoadEndpoints()
	if err != nil || len(eps) != n+1 {
		t.Fatalf("state file holds %d endpoints (%v), want %d", len(eps), err, n+1)
	}
	for _, e := range eps {
		if len(e.Addresses) != 2 || seen[e.Addresses[0].Addr] == 0 && e.ContainerID != att(0).ContainerID {
			t.Errorf("state file: %s/%s holds %v, not what its ADD answered", e.ContainerID, e.IfName, e.Addresses)
		}
	}
}

// TestFailedChangeFailsAloneInItsBatch: in one batch, a change that fails
// after writing part of itself and one that fails before writing get
// their own errors, and only they are left out: the others' changes are
// committed, on disk and in memory, and a change sees what the one
// before it in the batch wrote.
func TestFailedChangeFailsAloneInItsBatch(t *testing.T) {
	f := newFixture(t, t.TempDir(), Config{}, "10.0.0.0/24")
	d := newHeldDisk(f.db)
	f.disk.set(d)
	first := holdFirstWrite(t, f, d)

	a := store.Attachment{ContainerID: "a", IfName: "eth0"}
	b := store.Attachment{ContainerID: "b", IfName: "eth0"}
	endpoint := func(at store.Attachment, addr string) *store.Endpoint {
		return &store.Endpoint{Attachment: at, HostIfName: "ls" + at.ContainerID, State: store.EndpointReady,
			Addresses: []store.AddressRef{{Pool: "10.0.0.0/24", Addr: netip.MustParseAddr(addr), Bits: 24}}}
	}
	errHalfway := errors.New("fails after writing a pool")
	errAtOnce := api.Errorf(api.CodeBusy, "fails before writing")
	var runsOfA atomic.Int32
	var bSawA atomic.Bool
	changes := []struct {
		name string
		fn   func(*store.Txn) error
		want error
	}{
		{"attach a", func(txn *store.Txn) error {
			runsOfA.Add(1)
			return store.AttachEndpoint(txn, endpoint(a, "10.0.0.200"))
		}, nil},
		{"fail half-way", func(txn *store.Txn) error {
			if err := store.UpsertPool(txn, store.Pool{Name: "10.9.0.0/24", CIDR: netip.MustParsePrefix("10.9.0.0/24")}); err != nil {
				return err
			}
			return errHalfway
		}, errHalfway},
		{"fail at once", func(*store.Txn) error { return errAtOnce }, errAtOnce},
		{"attach b after a", func(txn *store.Txn) error {
			e, err := store.EndpointByAttachment(txn, nil, a)
			bSawA.Store(e != nil)
			if err != nil {
				return err
			}
			return store.AttachEndpoint(txn, endpoint(b, "10.0.0.201"))
		}, nil},
	}
	answers := make([]chan error, len(changes))
	for i, c := range changes {
		answers[i] = make(chan error, 1)
		go func() { answers[i] <- f.svc.write(ctx, c.fn) }()
		waitQueued(t, f.svc, i+1) // one batch, in this order
	}
	close(d.hold)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	for i, c := range changes {
		if err := <-answers[i]; !errors.Is(err, c.want) {
			t.Errorf("%s: answered %v, want %v", c.name, err, c.want)
		}
	}
	if got := d.wrote.Load(); got != 2 {
		t.Errorf("%d commits wrote the file, want 2 (the held ADD, then the batch)", got)
	}
	if runsOfA.Load() != 2 {
		t.Errorf("attach a ran %d times, want 2: once, then again without the change that failed half-way", runsOfA.Load())
	}
	if !bSawA.Load() {
		t.Error("attach b did not see a, written before it in its batch")
	}
	read := f.svc.store.ReadTxn()
	if p, _ := store.PoolByName(read, nil, "10.9.0.0/24"); p != nil {
		t.Error("the pool of the change that failed half-way was committed")
	}
	eps, err := f.db.LoadEndpoints()
	if err != nil {
		t.Fatal(err)
	}
	var onDisk []string
	for _, e := range eps {
		onDisk = append(onDisk, e.ContainerID)
		if mem, _ := store.EndpointByAttachment(read, nil, e.Attachment); mem == nil {
			t.Errorf("%s is on disk, not in memory", e.ContainerID)
		}
	}
	if got := strings.Join(onDisk, ","); got != "a,b,c000" {
		t.Errorf("state file holds %s, want a,b,c000", got)
	}
}

// TestQueuedWriteGivesUpAtItsDeadline: a write that cannot start before
// its context ends (the disk holds the write before it, or another writer
// holds the store) is answered try-again-later at its deadline and never
// runs, not even once its turn comes.
func TestQueuedWriteGivesUpAtItsDeadline(t *testing.T) {
	tests := []struct {
		name string
		// block makes writes wait and returns what unblocks them.
		block func(t *testing.T, f *fixture) (release func())
	}{
		{"disk holds the write before it", func(t *testing.T, f *fixture) func() {
			d := newHeldDisk(f.db)
			f.disk.set(d)
			first := holdFirstWrite(t, f, d)
			return func() {
				close(d.hold)
				if err := <-first; err != nil {
					t.Errorf("the held ADD: %v", err)
				}
			}
		}},
		{"another writer holds the store", func(t *testing.T, f *fixture) func() {
			txn := f.svc.store.WriteTxn()
			return txn.Abort
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, t.TempDir(), Config{}, "10.0.0.0/24")
			release := tc.block(t, f)
			var ran atomic.Bool
			const deadline = 100 * time.Millisecond
			wctx, cancel := context.WithTimeout(ctx, deadline)
			defer cancel()
			start := time.Now()
			answer := make(chan error, 1)
			go func() {
				answer <- f.svc.write(wctx, func(txn *store.Txn) error {
					ran.Store(true)
					return store.UpsertPool(txn, store.Pool{Name: "10.9.0.0/24", CIDR: netip.MustParsePrefix("10.9.0.0/24")})
				})
			}()
			var err error
			select {
			case err = <-answer:
			case <-time.After(deadline + 2*time.Second):
				release()
				t.Fatalf("the queued write got no answer %s after its deadline", 2*time.Second)
			}
			took := time.Since(start)
			release()
			waitIdle(t, f.svc)
			if api.CodeOf(err) != api.CodeTryAgainLater || !strings.Contains(err.Error(), "nothing was changed") {
				t.Errorf("queued write: %v, want try-again-later", err)
			}
			if took > deadline+time.Second {
				t.Errorf("queued write answered after %s, its deadline was %s", took, deadline)
			}
			if ran.Load() {
				t.Error("the write that gave up ran once its turn came")
			}
			if p, _ := store.PoolByName(f.svc.store.ReadTxn(), nil, "10.9.0.0/24"); p != nil {
				t.Error("the write that gave up changed the store")
			}
		})
	}
}

// TestRefusedBatchIsCommittedChangeByChange: when the state file refuses
// a batch before writing it (a record bbolt cannot store: the file is as
// it was), each change is committed on its own, so only the one the file
// refuses fails; a commit that fails (persist.ErrCommitFailed) fails the
// whole batch, and nothing of it is visible.
func TestRefusedBatchIsCommittedChangeByChange(t *testing.T) {
	holds := func(changes memdb.Changes, id string) bool {
		for _, ch := range changes {
			if e, ok := ch.After.(*store.Endpoint); ok && e.ContainerID == id {
				return true
			}
		}
		return false
	}
	tests := []struct {
		name   string
		refuse func(memdb.Changes) error
		// wantOK are the ADDs (of att(1..3)) that succeed.
		wantOK []bool
	}{
		{"one record refused", func(changes memdb.Changes) error {
			if holds(changes, att(2).ContainerID) {
				return errors.New("key too large")
			}
			return nil
		}, []bool{true, false, true}},
		{"commit failed", func(changes memdb.Changes) error {
			if holds(changes, att(2).ContainerID) {
				return fmt.Errorf("commit to state file: %w: fdatasync: input/output error", persist.ErrCommitFailed)
			}
			return nil
		}, []bool{false, false, false}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, t.TempDir(), Config{}, "10.0.0.0/24")
			d := newHeldDisk(f.db)
			d.refuse = tc.refuse
			f.disk.set(d)
			first := holdFirstWrite(t, f, d)
			answers := make([]chan error, 3)
			for i := range answers {
				answers[i] = make(chan error, 1)
				go func() {
					_, err := f.svc.Add(ctx, api.AddRequest{Attachment: att(i + 1), Netns: "/x"})
					answers[i] <- err
				}()
				waitQueued(t, f.svc, i+1)
			}
			close(d.hold)
			if err := <-first; err != nil {
				t.Fatal(err)
			}
			for i, ch := range answers {
				err := <-ch
				if ok := err == nil; ok != tc.wantOK[i] {
					t.Errorf("ADD %d: %v, want success: %v", i+1, err, tc.wantOK[i])
				}
				if err != nil && (api.CodeOf(err) != api.CodeInternal || !strings.Contains(err.Error(), "could not record the change durably")) {
					t.Errorf("ADD %d: %v, want the internal error of a write the state file refused", i+1, err)
				}
				e, _ := store.EndpointByAttachment(f.svc.store.ReadTxn(), nil, toStore(att(i+1)))
				if (e != nil) != tc.wantOK[i] {
					t.Errorf("ADD %d: in the store: %v, want %v", i+1, e != nil, tc.wantOK[i])
				}
			}
		})
	}
}

// BenchmarkBurstAdd measures a burst of concurrent ADDs and confirms
// against a state file on the test's temporary directory (fsync
// included), and reports the state file commits per ADD.
func BenchmarkBurstAdd(b *testing.B) {
	const burst = 128
	t := &testing.T{}
	var commits atomic.Int64
	adds := 0
	for i := range b.N {
		b.StopTimer()
		f := newFixture(t, b.TempDir(), Config{}, "10.0.0.0/16")
		f.db.OnWrite(func(time.Duration) { commits.Add(1) })
		var wg sync.WaitGroup
		b.StartTimer()
		for j := range burst {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a := api.Attachment{ContainerID: fmt.Sprintf("burst-%d-%d", i, j), IfName: "eth0"}
				resp, err := f.svc.Add(ctx, api.AddRequest{Attachment: a, Netns: "/x"})
				if err == nil {
					err = f.svc.Confirm(ctx, api.OpRequest{Attachment: a, OpID: resp.OpID})
				}
				if err != nil {
					b.Error(err)
				}
			}()
		}
		wg.Wait()
		adds += burst
		b.StopTimer()
		f.db.Close()
	}
	b.ReportMetric(float64(commits.Load())/float64(adds), "fsyncs/add")
	b.ReportMetric(float64(adds)/b.Elapsed().Seconds(), "adds/s")
}

// TestConfirmEnforcesTheRevisionThatHoldsItReady: Confirm asks for its
// policy as of a store revision that holds the endpoint Ready, whether it
// changed it or found it confirmed already, so the enforcer can tell
// whether an apply already covers it.
func TestConfirmEnforcesTheRevisionThatHoldsItReady(t *testing.T) {
	type call struct {
		hostIf string
		rev    uint64
	}
	var calls []call
	f := newFixture(t, t.TempDir(), Config{Enforce: func(_ context.Context, hostIf string, rev uint64) error {
		calls = append(calls, call{hostIf, rev})
		return nil
	}}, "10.0.0.0/24")
	resp := f.add(t, att(1))
	// Another change commits; a repeated confirm finds the endpoint Ready.
	f.add(t, att(2))
	if err := f.svc.Confirm(ctx, api.OpRequest{Attachment: att(1), OpID: resp.OpID}); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 3 {
		t.Fatalf("Enforce called %d times, want 3", len(calls))
	}
	e, err := store.EndpointByAttachment(f.svc.store.ReadTxn(), nil, toStore(att(1)))
	if err != nil || e == nil || e.State != store.EndpointReady {
		t.Fatalf("endpoint after confirm: %+v, %v", e, err)
	}
	for i, c := range []call{calls[0], calls[2]} {
		if c.hostIf != resp.HostIfName || c.rev < e.ModifyRevision {
			t.Errorf("confirm %d: Enforce(%s, revision %d); want %s at revision %d or later, where it became Ready",
				i+1, c.hostIf, c.rev, resp.HostIfName, e.ModifyRevision)
		}
	}
	if calls[1].rev <= calls[0].rev {
		t.Errorf("the second ADD's confirm asked for revision %d, not newer than the first's %d", calls[1].rev, calls[0].rev)
	}
}

// TestDeriveFailsTheWholeTransaction: Derive's error is every change's
// answer, and nothing of the transaction is committed: the refused ADD
// holds no address, and after a later ADD (Derive healed) the pool holds
// one.
func TestDeriveFailsTheWholeTransaction(t *testing.T) {
	var fail atomic.Bool
	derived := 0
	f := newFixture(t, t.TempDir(), Config{Derive: func(txn *store.Txn) error {
		if fail.Load() {
			return errors.New("slices broken")
		}
		derived++
		return nil
	}}, "10.0.0.0/24")
	fail.Store(true)
	_, err := f.svc.Add(ctx, api.AddRequest{Attachment: att(1), Netns: "/run/netns/x", Pod: api.PodRef{Namespace: "ns", Name: "p"}})
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.Code != api.CodeInternal || !strings.Contains(apiErr.Details, "slices broken") {
		t.Fatalf("ADD with a failing Derive: %v, want code %d naming the cause", err, api.CodeInternal)
	}
	if e, err := store.EndpointByAttachment(f.svc.store.ReadTxn(), nil, toStore(att(1))); err != nil || e != nil {
		t.Fatalf("the refused ADD left %+v (%v)", e, err)
	}
	fail.Store(false)
	f.add(t, att(2))
	if n, err := store.CountAllocations(f.svc.store.ReadTxn(), "10.0.0.0/24"); err != nil || n != 1 {
		t.Fatalf("%d allocations after a refused and a good ADD (%v), want 1", n, err)
	}
	if derived != 2 {
		t.Fatalf("Derive ran %d times for an ADD and its confirm, want 2", derived)
	}
}
