package source

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"lockstep.dev/lockstep/agent/store"
	"lockstep.dev/lockstep/internal/backoff"
	"lockstep.dev/lockstep/internal/watchdog"
	corev1 "lockstep.dev/lockstep/kube/api/core/v1"
	discoveryv1 "lockstep.dev/lockstep/kube/api/discovery/v1"
	networkingv1 "lockstep.dev/lockstep/kube/api/networking/v1"
	"lockstep.dev/lockstep/kube/client"
)

// Defaults for Options.
const (
	// DefaultBatchDelay is how long the source waits after an event for
	// more before it commits them together: a rollout's burst of pod
	// updates becomes a few store revisions, not hundreds.
	DefaultBatchDelay = 10 * time.Millisecond
	// progressInterval is how often WaitSynced says what it still waits
	// for.
	progressInterval = 10 * time.Second
	// retryFirst and retryMax bound how long a batch that failed to
	// commit waits before the next attempt, doubling while it fails.
	retryFirst = time.Second
	retryMax   = 30 * time.Second
)

// Options configures a Source.
type Options struct {
	// Config reaches the API server (client.InClusterConfig, or a
	// kubeconfig's).
	Config *client.Config
	// NodeName is the node this agent runs on: its pods' addresses come
	// from the agent's CNI endpoints, not from the API.
	NodeName string
	// Store receives namespaces, pods, network policies, Services and
	// EndpointSlices.
	Store *store.Store
	// OnNodes, when set, is called with the nodes' view after the first
	// sync and after every change of a Node or NodeIPAM, from one
	// goroutine at a time.
	OnNodes func(Nodes)
	// BatchDelay is DefaultBatchDelay when zero; negative commits each
	// wake-up at once.
	BatchDelay time.Duration
	Logger     *slog.Logger
	// Heartbeat, when set, is beaten by every turn of Run, which also
	// turns on its Tick; waiting for the API server's first lists beats
	// it too. A commit that hangs silences it.
	Heartbeat *watchdog.Loop
}

// kind is an object kind the source commits to the store.
type kind int

const (
	kindNamespace kind = iota
	kindPod
	kindPolicy
	kindService
	kindEndpointSlice
	numKinds
)

var kindNames = [numKinds]string{"namespaces", "pods", "networkpolicies", "services", "endpointslices"}

// Source follows the API server's Pods, Namespaces, NetworkPolicies,
// Services, EndpointSlices, Nodes and NodeIPAMs and commits the objects
// the dataplane is compiled from to the store. It never writes to the API
// server.
type Source struct {
	opts      Options
	log       *slog.Logger
	informers [numKinds]*client.Informer
	nodes     *client.Informer
	ipams     *client.Informer

	mu         sync.Mutex
	dirty      [numKinds]map[string]bool
	nodesDirty bool
	// selfDirty: this agent's Node changed since the last commit.
	selfDirty bool
	wake      chan struct{}

	synced chan struct{}
}

// New returns a Source; Run starts it. It contacts nothing yet.
func New(opts Options) (*Source, error) {
	if opts.Config == nil || opts.Store == nil || opts.NodeName == "" {
		return nil, errors.New("create kubernetes source: Config, Store and NodeName are required")
	}
	if opts.BatchDelay == 0 {
		opts.BatchDelay = DefaultBatchDelay
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	core, err := client.ForGroup(opts.Config, corev1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	networking, err := client.ForGroup(opts.Config, networkingv1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	discovery, err := client.ForGroup(opts.Config, discoveryv1.SchemeGroupVersion)
	if err != nil {
		return nil, err
	}
	lockstep, err := client.NewForConfig(opts.Config)
	if err != nil {
		return nil, err
	}
	s := &Source{opts: opts, log: opts.Logger, wake: make(chan struct{}, 1), synced: make(chan struct{})}
	s.informers[kindNamespace] = s.newInformer(listWatch(core, "namespaces"))
	s.informers[kindPod] = s.newInformer(listWatch(core, "pods"))
	s.informers[kindPolicy] = s.newInformer(listWatch(networking, "networkpolicies"))
	s.informers[kindService] = s.newInformer(listWatch(core, "services"))
	s.informers[kindEndpointSlice] = s.newInformer(listWatch(discovery, "endpointslices"))
	s.nodes = s.newInformer(listWatch(core, "nodes"))
	s.ipams = s.newInformer(lockstep.NodeIPAMs().ListWatch(nil))
	for k := range numKinds {
		s.dirty[k] = map[string]bool{}
		s.informers[k].AddHandler(s.handler(func(key string) { s.dirty[k][key] = true }))
	}
	s.nodes.AddHandler(s.handler(func(key string) {
		s.nodesDirty = true
		s.selfDirty = s.selfDirty || key == opts.NodeName
	}))
	s.ipams.AddHandler(s.handler(func(string) { s.nodesDirty = true }))
	return s, nil
}

func (s *Source) newInformer(lw client.ListWatch) *client.Informer {
	inf := client.NewInformer(lw, s.log)
	inf.SetTransform(trim)
	return inf
}

// handler marks the key of every added, updated or deleted object with
// mark, under s.mu, and wakes Run.
func (s *Source) handler(mark func(key string)) client.Handler {
	on := func(obj client.Object) {
		s.mu.Lock()
		mark(client.Key(obj))
		s.mu.Unlock()
		s.poke()
	}
	return client.Handler{
		Add:    on,
		Update: func(_, obj client.Object) { on(obj) },
		Delete: on,
	}
}

func (s *Source) poke() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run starts the informers, commits everything once they have listed, and
// then commits each change (or short batch of changes) in one store write
// transaction, until ctx ends.
func (s *Source) Run(ctx context.Context) {
	all := append(s.informers[:], s.nodes, s.ipams)
	for _, inf := range all {
		go inf.Run(ctx)
	}
	if !s.waitInformers(ctx, all) {
		return
	}
	retry := backoff.Backoff{First: retryFirst, Max: retryMax}
	for {
		s.opts.Heartbeat.Beat()
		if err := s.commitAll(); err != nil {
			wait := retry.Next(time.Now())
			s.log.Error("commit the API server's objects to the store; retrying", "err", err, "in", wait)
			if !backoff.Sleep(ctx, wait) {
				return
			}
			continue
		}
		retry.Reset()
		break
	}
	s.publishNodes()
	close(s.synced)
	s.log.Info("kubernetes source synced", "node", s.opts.NodeName)

	for {
		s.opts.Heartbeat.Beat()
		select {
		case <-ctx.Done():
			return
		case <-s.opts.Heartbeat.Tick():
			continue
		case <-s.wake:
		}
		if s.opts.BatchDelay > 0 && !backoff.Sleep(ctx, s.opts.BatchDelay) {
			return
		}
		if err := s.commitDirty(); err != nil {
			wait := retry.Next(time.Now())
			s.log.Error("commit changes from the API server to the store; retrying", "err", err, "in", wait)
			time.AfterFunc(wait, s.poke)
		} else {
			retry.Reset()
		}
		s.publishNodesIfDirty()
	}
}

// waitInformers waits for every informer's first list, saying every
// progressInterval which ones are still missing. It reports false when ctx
// ended first.
func (s *Source) waitInformers(ctx context.Context, all []*client.Informer) bool {
	names := append(kindNames[:], "nodes", "nodeipams")
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	start := time.Now()
	lastReport := start
	for {
		s.opts.Heartbeat.Beat()
		var missing []string
		for i, inf := range all {
			if !inf.HasSynced() {
				missing = append(missing, names[i])
			}
		}
		if len(missing) == 0 {
			return true
		}
		if time.Since(lastReport) >= progressInterval {
			lastReport = time.Now()
			s.log.Info("waiting for the API server to list objects", "host", s.opts.Config.Host,
				"missing", strings.Join(missing, ","), "waited", time.Since(start).Round(time.Second))
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
		}
	}
}

// WaitSynced blocks until Run has committed the API server's first
// complete list of every kind, or ctx ends.
func (s *Source) WaitSynced(ctx context.Context) error {
	select {
	case <-s.synced:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for the kubernetes source: %w", context.Cause(ctx))
	}
}

// commitAll replaces the store's objects with everything the informers
// hold, in one transaction. Marks taken before it are covered by it.
func (s *Source) commitAll() error {
	s.mu.Lock()
	for k := range numKinds {
		s.dirty[k] = map[string]bool{}
	}
	s.selfDirty = false
	s.mu.Unlock()
	objs, slices := s.objects()
	txn := s.opts.Store.WriteTxn()
	defer txn.Abort()
	if _, err := store.ReplaceObjects(txn, objs); err != nil {
		return err
	}
	if _, err := store.ReplaceEndpointSlices(txn, slices); err != nil {
		return err
	}
	if _, err := s.applySelf(txn); err != nil {
		return err
	}
	return txn.Commit()
}

// applySelf writes what translation needs of this agent's Node (its zone)
// into txn, or deletes it when the API server has no such Node. It
// reports whether anything changed.
func (s *Source) applySelf(txn *store.Txn) (bool, error) {
	old, err := store.NodeByName(txn, nil, s.opts.NodeName)
	if err != nil {
		return false, err
	}
	obj, ok := s.nodes.Get(s.opts.NodeName)
	n, isNode := obj.(*corev1.Node)
	if !ok || !isNode {
		if old == nil {
			return false, nil
		}
		return true, store.DeleteNode(txn, s.opts.NodeName)
	}
	next := ConvertNode(n)
	if old != nil && old.Name == next.Name && old.Zone == next.Zone && slices.Equal(old.Addrs, next.Addrs) {
		return false, nil
	}
	return true, store.UpsertNode(txn, next)
}

// commitDirty commits the objects marked since the last commit in one
// transaction. On failure the marks are restored for the next attempt.
func (s *Source) commitDirty() error {
	s.mu.Lock()
	var b batch
	for k := range numKinds {
		for key := range s.dirty[k] {
			b.keys[k] = append(b.keys[k], key)
		}
		s.dirty[k] = map[string]bool{}
	}
	self := s.selfDirty
	s.selfDirty = false
	s.mu.Unlock()
	if b.empty() && !self {
		return nil
	}
	txn := s.opts.Store.WriteTxn()
	defer txn.Abort()
	changed, err := b.apply(txn, s.lookup, s.converter())
	if err == nil && self {
		var selfChanged bool
		selfChanged, err = s.applySelf(txn)
		changed = changed || selfChanged
	}
	if err == nil && changed {
		err = txn.Commit()
	}
	if err != nil {
		s.mu.Lock()
		for k := range numKinds {
			for _, key := range b.keys[k] {
				s.dirty[k][key] = true
			}
		}
		s.selfDirty = s.selfDirty || self
		s.mu.Unlock()
		return err
	}
	return nil
}
