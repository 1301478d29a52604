package operator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	apierrors "lockstep.dev/lockstep/kube/api/errors"
	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/types"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

// PendingBlocksAnnotation is the IPPool annotation that serialises block
// assignment: the blocks one writer is about to add to NodeIPAMs, written
// with a resourceVersion precondition before any of them is, and removed
// once all are. The package documentation explains why; a person should
// never need to edit it.
const PendingBlocksAnnotation = "lockstep.dev/pending-blocks"

// maxAttempts bounds the re-read-and-retry loop of one write.
const maxAttempts = 8

// pendingBlocks is the value of PendingBlocksAnnotation.
type pendingBlocks struct {
	// ID tells one set of pending blocks from the next, so that a writer
	// can see that the set it wrote has been completed by someone else.
	ID string `json:"id"`
	// Holder is the operator replica that wrote it, for people.
	Holder string         `json:"holder"`
	Blocks []pendingBlock `json:"blocks"`
}

// pendingBlock is one block on its way to one NodeIPAM.
type pendingBlock struct {
	CIDR     v1alpha1.CIDR `json:"cidr"`
	NodeIPAM string        `json:"nodeIPAM"`
	// UID is the NodeIPAM object's own UID: a NodeIPAM re-created since
	// does not receive the block.
	UID types.UID `json:"uid"`
}

// readPending returns pool's pending blocks, nil if there are none.
func readPending(pool *v1alpha1.IPPool) (*pendingBlocks, error) {
	raw, ok := pool.Annotations[PendingBlocksAnnotation]
	if !ok {
		return nil, nil
	}
	p := new(pendingBlocks)
	if err := json.Unmarshal([]byte(raw), p); err != nil || p.ID == "" {
		return nil, fmt.Errorf("read annotation %s of ippool %s: %q is not what the operator writes; "+
			"no block is assigned from the pool until it is removed (after checking no NodeIPAM lacks a block it names)",
			PendingBlocksAnnotation, pool.Name, raw)
	}
	return p, nil
}

func newPendingID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// assignFrom gives blocks of pool poolName to the nodes that are short of
// addresses. It is the one place blocks are added to NodeIPAMs:
//
//  1. Read the pool. If it carries pending blocks, someone's assignment is
//     unfinished: complete it, remove the annotation, start again.
//  2. List the NodeIPAMs from the API server (not the cache) and plan on
//     that: the blocks to cut are free in a state no older than the pool
//     read in step 1.
//  3. Write them to the pool's annotation, conditional on the pool's
//     resourceVersion from step 1. A conflict means another writer got in
//     between: start again.
//  4. Add each block to its NodeIPAM (complete), then remove the
//     annotation.
//
// Any writer that wants to cut a block from the pool must first win step
// 3 on a pool without pending blocks, so it lists the NodeIPAMs after
// every earlier assignment has landed in them: two writers, even two that
// both believe they lead, never cut the same block.
func (c *controller) assignFrom(ctx context.Context, poolName string) error {
	pools := c.c.lockstep.IPPools()
	for attempt := 0; attempt < maxAttempts; attempt++ {
		pool, err := pools.Get(ctx, poolName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("assign blocks of pool %s: %w", poolName, err)
		}
		pend, err := readPending(pool)
		if err != nil {
			return err
		}
		if pend != nil {
			c.log.Info("completing pending block assignment", "pool", poolName, "id", pend.ID, "holder", pend.Holder, "blocks", len(pend.Blocks))
			if err := c.complete(ctx, poolName, pend); err != nil {
				return err
			}
			if err := c.clearPending(ctx, pool, pend.ID); err != nil {
				return err
			}
			continue
		}

		list, err := c.c.lockstep.NodeIPAMs().List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("assign blocks of pool %s: %w", poolName, err)
		}
		in := c.input(time.Now())
		in.nodeIPAMs = in.nodeIPAMs[:0]
		for i := range list.Items {
			in.nodeIPAMs = append(in.nodeIPAMs, &list.Items[i])
		}
		for i, p := range in.pools {
			if p.Name == poolName {
				in.pools[i] = pool
			}
		}
		var blocks []pendingBlock
		for _, a := range planFor(in).assigns {
			if a.block.Pool == poolName {
				blocks = append(blocks, pendingBlock{CIDR: a.block.CIDR, NodeIPAM: a.nodeIPAM, UID: a.uid})
			}
		}
		if len(blocks) == 0 {
			return nil
		}
		pend = &pendingBlocks{ID: newPendingID(), Holder: c.identity, Blocks: blocks}
		raw, err := json.Marshal(pend)
		if err != nil {
			return fmt.Errorf("assign blocks of pool %s: %w", poolName, err)
		}
		next := pool.DeepCopy()
		if next.Annotations == nil {
			next.Annotations = map[string]string{}
		}
		next.Annotations[PendingBlocksAnnotation] = string(raw)
		written, err := pools.Update(ctx, next, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			c.log.Debug("pool changed while planning an assignment; re-reading", "pool", poolName)
			continue
		}
		if err != nil {
			return fmt.Errorf("assign blocks of pool %s: %w", poolName, err)
		}
		if err := c.complete(ctx, poolName, pend); err != nil {
			return err // the annotation stays: the next writer completes it
		}
		return c.clearPending(ctx, written, pend.ID)
	}
	return fmt.Errorf("assign blocks of pool %s: the pool kept changing for %d attempts; retrying on the next pass", poolName, maxAttempts)
}

// complete adds every pending block to its NodeIPAM, unless the NodeIPAM
// has been replaced or deleted since, or the pending set has been
// completed by another writer meanwhile. It may run in several writers at
// once: each write is conditional on the resourceVersion read just before
// it, after checking the set is still pending, so a block is added at most
// while its set is pending and never after the set is cleared.
func (c *controller) complete(ctx context.Context, poolName string, pend *pendingBlocks) error {
	var names []string
	byName := map[string][]pendingBlock{}
	for _, b := range pend.Blocks {
		if _, ok := byName[b.NodeIPAM]; !ok {
			names = append(names, b.NodeIPAM)
		}
		byName[b.NodeIPAM] = append(byName[b.NodeIPAM], b)
	}
	ipams := c.c.lockstep.NodeIPAMs()
	for _, name := range names {
		want := byName[name]
		for attempt := 0; ; attempt++ {
			n, err := ipams.Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				c.log.Info("not assigning blocks: the nodeipam is gone", "nodeipam", name, "pool", poolName)
				break
			}
			if err != nil {
				return fmt.Errorf("assign blocks to nodeipam %s: %w", name, err)
			}
			if n.UID != want[0].UID || n.DeletionTimestamp != nil {
				c.log.Info("not assigning blocks: the nodeipam was replaced or is being deleted", "nodeipam", name, "pool", poolName)
				break
			}
			// Read the object first, then check the set is still
			// pending: a set cleared after this check was completed by
			// someone whose write changed the object, so ours conflicts.
			pool, err := c.stillPending(ctx, poolName, pend.ID)
			if err != nil {
				return err
			}
			if pool == nil {
				return nil
			}
			next := n.DeepCopy()
			var added []v1alpha1.CIDR
			for _, b := range want {
				if next.Spec.Block(b.CIDR) != nil {
					continue
				}
				if !inPool(pool, b.CIDR) {
					// The pool was shrunk since the set was planned.
					c.log.Info("not assigning block: it is no longer inside its pool's CIDRs", "nodeipam", name, "block", b.CIDR, "pool", poolName)
					continue
				}
				next.Spec.Blocks = append(next.Spec.Blocks, v1alpha1.Block{CIDR: b.CIDR, Pool: poolName})
				next.Spec.Releases = slices.DeleteFunc(next.Spec.Releases, func(m v1alpha1.ReleaseMark) bool { return m.CIDR == b.CIDR })
				added = append(added, b.CIDR)
			}
			if len(added) == 0 {
				break
			}
			_, err = ipams.Update(ctx, next, metav1.UpdateOptions{})
			if err == nil {
				for _, cidr := range added {
					c.log.Info("assigned block", "nodeipam", name, "block", cidr, "pool", poolName, "generation", n.Generation+1)
				}
				c.ops.blocksAssigned(poolName, len(added))
				break
			}
			if !apierrors.IsConflict(err) || attempt+1 >= maxAttempts {
				return fmt.Errorf("assign blocks to nodeipam %s: %w", name, err)
			}
			c.log.Debug("conflict assigning blocks; re-reading", "nodeipam", name)
		}
	}
	return nil
}

// stillPending returns pool poolName as read now if it still carries the
// pending set id, and nil if it does not.
func (c *controller) stillPending(ctx context.Context, poolName, id string) (*v1alpha1.IPPool, error) {
	pool, err := c.c.lockstep.IPPools().Get(ctx, poolName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("assign blocks of pool %s: %w", poolName, err)
	}
	pend, err := readPending(pool)
	if err != nil || pend == nil || pend.ID != id {
		return nil, err
	}
	return pool, nil
}

// clearPending removes the pending set id from pool, re-reading on
// conflict; a set already removed, or replaced by another, is left alone.
func (c *controller) clearPending(ctx context.Context, pool *v1alpha1.IPPool, id string) error {
	pools, name := c.c.lockstep.IPPools(), pool.Name
	for attempt := 0; attempt < maxAttempts; attempt++ {
		pend, err := readPending(pool)
		if err != nil {
			return err
		}
		if pend == nil || pend.ID != id {
			return nil
		}
		next := pool.DeepCopy()
		delete(next.Annotations, PendingBlocksAnnotation)
		_, err = pools.Update(ctx, next, metav1.UpdateOptions{})
		if err == nil {
			c.log.Debug("block assignment complete", "pool", name, "id", id)
			return nil
		}
		if !apierrors.IsConflict(err) {
			return fmt.Errorf("clear pending blocks of pool %s: %w", name, err)
		}
		if pool, err = pools.Get(ctx, name, metav1.GetOptions{}); err != nil {
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("clear pending blocks of pool %s: %w", name, err)
		}
	}
	return fmt.Errorf("clear pending blocks of pool %s: the pool kept changing for %d attempts", name, maxAttempts)
}
