package endpoints

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/persist"
	"lockstep.dev/lockstep/agent/store"
)

// writeReq is one caller's change waiting for the committer.
type writeReq struct {
	ctx context.Context
	fn  func(*store.Txn) error
	// state goes from reqQueued to reqTaken when the committer takes the
	// change into a batch, or to reqAbandoned when its caller gives up
	// first; never both.
	state atomic.Int32
	// done receives the change's one answer. It is buffered: the
	// committer never waits for a caller.
	done chan error
}

// States of a writeReq.
const (
	reqQueued int32 = iota
	reqTaken
	reqAbandoned
)

// write runs fn in a store write transaction, writes the durable changes
// to the state file, and commits: the change is on disk before anyone can
// see it, and write returns only then. fn's error aborts its own change
// only, and is write's answer.
//
// Concurrent writes are committed in groups, so that a burst of ADDs pays
// for one fsync per group rather than one each: every write queues its
// fn, and one committer at a time takes everything queued, runs the fns in
// the order they came in one store transaction (a fn sees what the ones
// before it wrote), and writes them to the state file in one bbolt
// transaction, one fsync, before it commits the store and answers them
// all. A fn may be run more than once (see apply): it must set whatever
// it hands its caller afresh on every run.
//
// A write that cannot start before ctx ends fails with CodeTryAgainLater,
// having changed nothing: while queued, its caller gives up at the
// deadline (the committer may be stuck in an fsync on a hung disk for as
// long as the disk hangs), and the committer drops a change whose ctx
// ended before it runs it.
func (s *Service) write(ctx context.Context, fn func(*store.Txn) error) error {
	if ctx.Err() != nil {
		return s.busy(ctx)
	}
	r := &writeReq{ctx: ctx, fn: fn, done: make(chan error, 1)}
	s.queueMu.Lock()
	s.queue = append(s.queue, r)
	start := !s.committing
	s.committing = true
	s.queueMu.Unlock()
	if start {
		go s.commitQueued()
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
	}
	if r.state.CompareAndSwap(reqQueued, reqAbandoned) {
		return s.busy(ctx)
	}
	// The committer has it: its answer comes (or the disk hangs, and the
	// API server answers for it at its own deadline).
	return <-r.done
}

// commitQueued commits batches until nothing is queued. One runs at a
// time: write starts it when none runs.
func (s *Service) commitQueued() {
	for {
		s.queueMu.Lock()
		if len(s.queue) == 0 {
			s.committing = false
			s.queueMu.Unlock()
			return
		}
		s.queueMu.Unlock()
		s.commitNext()
	}
}

// commitNext takes every write queued and commits them as one batch.
func (s *Service) commitNext() {
	s.writingSince.Store(time.Now().UnixNano())
	defer s.writingSince.Store(0)
	// The store's writer lock may be held by another writer (a source's,
	// which does not queue here); the queue is taken only once it is
	// ours, so that a write that waited for it past its deadline is not
	// run.
	txn := s.store.WriteTxn()
	s.queueMu.Lock()
	queued := s.queue
	s.queue = nil
	s.queueMu.Unlock()
	batch := make([]*writeReq, 0, len(queued))
	for _, r := range queued {
		if !r.state.CompareAndSwap(reqQueued, reqTaken) {
			continue // its caller has given up
		}
		if r.ctx.Err() != nil {
			r.done <- s.busy(r.ctx)
			continue
		}
		batch = append(batch, r)
	}
	s.commit(txn, batch)
}

// commit runs batch's changes in txn (see apply), writes what they changed
// to the state file in one transaction, commits txn, and answers them.
//
// A failed commit is fatal (persist.ErrCommitFailed): every change of the
// batch fails, and so does every later one, and the agent stops. A state
// file that refused the batch before its commit (the file is as it was;
// a record bbolt cannot store) was refused one change's fault: each change
// is then committed on its own, so that only that one fails.
func (s *Service) commit(txn *store.Txn, batch []*writeReq) {
	txn, batch = s.apply(txn, batch)
	defer txn.Abort()
	if len(batch) == 0 {
		return
	}
	if s.cfg.Derive != nil {
		if err := s.cfg.Derive(txn); err != nil {
			for _, r := range batch {
				r.done <- &api.Error{Code: api.CodeInternal, Msg: "lockstep agent could not compute what follows from the change", Details: err.Error() + "; nothing was changed"}
			}
			return
		}
	}
	err := txn.Commit()
	switch {
	case err == nil:
		for _, r := range batch {
			r.done <- nil
		}
	case len(batch) == 1 || errors.Is(err, persist.ErrCommitFailed):
		for _, r := range batch {
			r.done <- &api.Error{Code: api.CodeInternal, Msg: "lockstep agent could not record the change durably", Details: err.Error()}
		}
	default:
		txn.Abort()
		for _, r := range batch {
			s.commit(s.store.WriteTxn(), []*writeReq{r})
		}
	}
}

// apply runs each change of batch in txn, in order, and returns the
// transaction holding those that succeeded, and them. A change that
// fails is answered its error at once and left out: as it is when it
// wrote nothing before it failed (txn.Writes), otherwise by aborting txn
// and running the others again, in a new transaction, without it.
func (s *Service) apply(txn *store.Txn, batch []*writeReq) (*store.Txn, []*writeReq) {
	for {
		ok := make([]*writeReq, 0, len(batch))
		var again []*writeReq
		for i, r := range batch {
			before := txn.Writes()
			err := r.fn(txn)
			if err == nil {
				ok = append(ok, r)
				continue
			}
			r.done <- err
			if txn.Writes() != before {
				again = append(ok, batch[i+1:]...)
				break
			}
		}
		if again == nil {
			return txn, ok
		}
		txn.Abort()
		txn, batch = s.store.WriteTxn(), again
	}
}

// busy is the error of a write that gave up waiting for its turn.
func (s *Service) busy(ctx context.Context) error {
	msg := "lockstep agent is busy: the change before this one is still being written to the state file"
	if since := s.writingSince.Load(); since != 0 {
		msg += fmt.Sprintf(" (for %s)", time.Since(time.Unix(0, since)).Round(time.Millisecond))
	}
	return &api.Error{
		Code:    api.CodeTryAgainLater,
		Msg:     msg,
		Details: fmt.Sprintf("%v; the state file's disk may be slow or hung; nothing was changed, the runtime retries", context.Cause(ctx)),
	}
}
