package endpoints

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/ipam"
	"lockstep.dev/lockstep/agent/persist"
	"lockstep.dev/lockstep/agent/store"
)

// Defaults for Config.
const (
	// DefaultAddLease bounds how long a Pending ADD holds off a DEL or GC.
	DefaultAddLease = 10 * time.Second
	// DefaultDelWait bounds how long a DEL waits for an in-flight ADD to
	// roll back; it stays below the plugin's own call timeout.
	DefaultDelWait = 1500 * time.Millisecond
)

// Config configures a Service.
type Config struct {
	// Pools are the node's address ranges; at least one IPv4 pool. They
	// must be empty with PoolsFromStore.
	Pools []netip.Prefix
	// PoolsFromStore is Kubernetes mode: the pools are whatever the store
	// holds, kept there by agent/nodeipam from the node's NodeIPAM (one
	// pool per assigned block), and ADD allocates from every one of them
	// that is not draining. ADD allocates the address families the store's
	// pools have, draining ones included, so a node whose only block of a
	// family is draining fails the ADD with a pool-exhausted error instead
	// of starting the pod without that family.
	PoolsFromStore bool
	// PinOptIn honours a pod's PinnedIPAnnotation only in namespaces
	// labelled PinNamespaceLabel: "true". Kubernetes mode sets it, because
	// there any tenant who may create a pod could otherwise take the
	// address others allowlist; with --manifests the node's operator
	// writes every pod and pins are honoured everywhere.
	PinOptIn bool
	AddLease time.Duration
	DelWait  time.Duration
	Logger   *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Enforce, when set, is called after an ADD's confirm commits and must
	// return only once the endpoint's policy is in force on hostIf, as of
	// store revision rev (which holds the confirmed endpoint) or a newer
	// one; its error fails the confirm, so the plugin rolls the ADD back
	// and the pod never runs unprotected.
	Enforce func(ctx context.Context, hostIf string, rev uint64) error
	// Derive, when set, runs in every write transaction of the service,
	// after its changes and before the commit, to write what the mode
	// computes from endpoints (standalone: the Services' EndpointSlices).
	// It commits with them: an ADD's confirm makes its pod a Service
	// backend in the revision Enforce puts in force. Its error fails every
	// change of the transaction, none committed.
	Derive func(txn *store.Txn) error
}

// Service implements the agent side of the CNI API.
type Service struct {
	store *store.Store
	db    *persist.DB
	cfg   Config
	log   *slog.Logger

	// cursorMu guards cursors, the next address to try per pool, so that
	// freed addresses are not reused at once.
	cursorMu sync.Mutex
	cursors  map[string]netip.Addr

	// queueMu guards queue, the writes waiting for the committer, and
	// committing, whether a committer goroutine runs (see write).
	queueMu    sync.Mutex
	queue      []*writeReq
	committing bool
	// writingSince is when the committer started the batch it is
	// writing, in Unix nanoseconds; 0 when it writes none.
	writingSince atomic.Int64
}

// PoolName is the store name of a configured pool: its CIDR.
func PoolName(p netip.Prefix) string { return p.Masked().String() }

// New restores the store from the state file and returns the service. st
// must be durable through db (store.NewDurable(db)): every write of the
// service commits through it.
// Endpoints whose pool is no longer configured keep their addresses in a
// draining pool; the agent never hands those out again until released.
func New(st *store.Store, db *persist.DB, cfg Config) (*Service, error) {
	if cfg.AddLease <= 0 {
		cfg.AddLease = DefaultAddLease
	}
	if cfg.DelWait <= 0 {
		cfg.DelWait = DefaultDelWait
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	switch {
	case cfg.PoolsFromStore && len(cfg.Pools) > 0:
		return nil, errors.New("configure pools: pools come from the store (Kubernetes mode); configure none")
	case !cfg.PoolsFromStore:
		if err := ValidatePools(cfg.Pools); err != nil {
			return nil, err
		}
	}
	if !st.Durable() {
		return nil, errors.New("create endpoint service: the store is not durable (store.NewDurable with the state file): an address handed out would not survive a restart")
	}
	s := &Service{store: st, db: db, cfg: cfg, log: cfg.Logger, cursors: map[string]netip.Addr{}}
	if err := s.restore(); err != nil {
		return nil, err
	}
	return s, nil
}

// ValidatePools checks a pool configuration: valid, masked, non-empty,
// non-overlapping CIDRs including at least one IPv4 pool.
func ValidatePools(pools []netip.Prefix) error {
	hasV4 := false
	for i, p := range pools {
		if !p.IsValid() {
			return fmt.Errorf("configure pools: invalid CIDR %v", p)
		}
		if p != p.Masked() {
			return fmt.Errorf("configure pools: %s has host bits set; did you mean %s?", p, p.Masked())
		}
		if ipam.Size(p) == 0 {
			return fmt.Errorf("configure pools: %s has no usable address", p)
		}
		hasV4 = hasV4 || p.Addr().Is4()
		for _, q := range pools[:i] {
			if p.Overlaps(q) {
				return fmt.Errorf("configure pools: %s overlaps %s", p, q)
			}
		}
	}
	if !hasV4 {
		return errors.New("configure pools: at least one IPv4 pool is needed (--pool-cidr 10.244.0.0/24)")
	}
	return nil
}

// restore loads the state file into the store in one transaction. Nothing
// is written back: the file is already the truth.
func (s *Service) restore() error {
	eps, err := s.db.LoadEndpoints()
	if err != nil {
		return err
	}
	txn := s.store.RestoreTxn()
	defer txn.Abort()
	for _, p := range s.cfg.Pools {
		if err := store.UpsertPool(txn, store.Pool{Name: PoolName(p), CIDR: p}); err != nil {
			return err
		}
	}
	for _, e := range eps {
		for _, ref := range e.Addresses {
			if err := s.restorePool(txn, ref); err != nil {
				return fmt.Errorf("restore %s/%s from %s: %w", e.ContainerID, e.IfName, s.db.Path(), err)
			}
		}
		if err := store.AttachEndpoint(txn, e); err != nil {
			return fmt.Errorf("restore %s/%s from %s: state file is inconsistent: %w", e.ContainerID, e.IfName, s.db.Path(), err)
		}
	}
	if err := txn.Commit(); err != nil {
		return err
	}
	if len(eps) > 0 {
		s.log.Info("restored endpoints from state file", "count", len(eps), "file", s.db.Path())
	}
	return nil
}

// restorePool makes sure the pool a restored address names exists and
// contains it, creating a draining pool for a CIDR no longer configured.
func (s *Service) restorePool(txn *store.Txn, ref store.AddressRef) error {
	pool, err := store.PoolByName(txn, nil, ref.Pool)
	if err != nil {
		return err
	}
	if pool == nil {
		cidr, err := netip.ParsePrefix(ref.Pool)
		if err != nil || !cidr.Contains(ref.Addr) {
			return fmt.Errorf("address %s names pool %q, which is not a CIDR containing it", ref.Addr, ref.Pool)
		}
		if s.cfg.PoolsFromStore {
			// Blocks come back through agent/nodeipam, which confirms each
			// with the node's NodeIPAM before it is allocated from.
			s.log.Debug("restored addresses of a block; draining until the NodeIPAM confirms it", "pool", ref.Pool)
		} else {
			s.log.Warn("pool no longer configured; keeping its allocations until released", "pool", ref.Pool)
		}
		return store.UpsertPool(txn, store.Pool{Name: ref.Pool, CIDR: cidr, Draining: true})
	}
	if !pool.CIDR.Contains(ref.Addr) {
		return fmt.Errorf("address %s is outside its pool %s", ref.Addr, pool.CIDR)
	}
	return nil
}

func newOpID() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.BigEndian.Uint64(b[:]) | 1
}

func toStore(a api.Attachment) store.Attachment {
	return store.Attachment{ContainerID: a.ContainerID, IfName: a.IfName}
}

func validAttachment(a api.Attachment) error {
	switch {
	case a.ContainerID == "":
		return api.Errorf(api.CodeInvalidEnv, "CNI_CONTAINERID is empty")
	case a.IfName == "" || len(a.IfName) > 15 || a.IfName == "." || a.IfName == "..":
		return api.Errorf(api.CodeInvalidEnv, "CNI_IFNAME %q is not a valid interface name (1-15 characters)", a.IfName)
	}
	for _, r := range a.IfName {
		if r == '/' || r == ':' || r <= ' ' || r == 0x7f {
			return api.Errorf(api.CodeInvalidEnv, "CNI_IFNAME %q contains %q", a.IfName, r)
		}
	}
	return nil
}

// toAPI converts a store endpoint to its wire form.
func toAPI(e *store.Endpoint) api.Endpoint {
	return api.Endpoint{
		Attachment: api.Attachment{ContainerID: e.ContainerID, IfName: e.IfName},
		Netns:      e.Netns,
		Pod:        api.PodRef(e.Pod),
		HostIfName: e.HostIfName,
		Addresses:  addresses(e),
		State:      e.State.String(),
		OpID:       e.OpID,
		Created:    e.Created,
	}
}

func addresses(e *store.Endpoint) []api.Address {
	out := make([]api.Address, 0, len(e.Addresses))
	for _, a := range e.Addresses {
		out = append(out, api.Address{Pool: a.Pool, Address: a.Prefix()})
	}
	return out
}

// inFlight reports whether an ADD may still be working on e.
func (s *Service) inFlight(e *store.Endpoint) bool {
	return (e.State == store.EndpointPending || e.State == store.EndpointCancelled) && s.cfg.Now().Before(e.Deadline)
}

// Get returns the committed endpoint of an attachment.
func (s *Service) Get(_ context.Context, att api.Attachment) (*api.Endpoint, error) {
	e, err := store.EndpointByAttachment(s.store.ReadTxn(), nil, toStore(att))
	if err != nil {
		return nil, api.Errorf(api.CodeInternal, "%v", err)
	}
	if e == nil {
		return nil, api.Errorf(api.CodeUnknownContainer, "lockstep agent has no record of %s/%s", att.ContainerID, att.IfName)
	}
	out := toAPI(e)
	return &out, nil
}

// Status reports every pool's usage.
func (s *Service) Status(context.Context) (*api.StatusResponse, error) {
	txn := s.store.ReadTxn()
	pools, err := store.Pools(txn, nil)
	if err != nil {
		return nil, api.Errorf(api.CodeInternal, "%v", err)
	}
	resp := &api.StatusResponse{}
	for _, p := range pools {
		used, err := store.CountAllocations(txn, p.Name)
		if err != nil {
			return nil, api.Errorf(api.CodeInternal, "%v", err)
		}
		size := ipam.Size(p.CIDR)
		resp.Pools = append(resp.Pools, api.PoolStatus{
			Name: p.Name, CIDR: p.CIDR, Size: size, Used: uint64(used),
			Free: size - min(size, uint64(used)), Draining: p.Draining,
		})
	}
	slices.SortFunc(resp.Pools, func(a, b api.PoolStatus) int { return a.CIDR.Addr().Compare(b.CIDR.Addr()) })
	return resp, nil
}
