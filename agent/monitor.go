package agent

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/store"
	"lockstep.dev/lockstep/agent/verdicts"
)

// verdictMonitor serves api.OpMonitor: the eBPF dataplane's verdict
// events, named from the store and the datapath's rule ids. It answers
// "not available" until the dataplane is loaded, and on the other
// dataplanes.
type verdictMonitor struct {
	stream atomic.Pointer[func(context.Context, api.MonitorRequest, func() error, func(api.Verdict) error) error]
	hub    atomic.Pointer[verdicts.Hub]
}

// start makes m serve the events of dp.
func (m *verdictMonitor) start(dp ebpfDataplane, st *store.Store, n *node) {
	hub := verdicts.NewHub(func() (verdicts.Reader, error) { return dp.Events() }, n.log)
	fn := hub.Stream(storeNamer{dp: dp, st: st})
	m.hub.Store(hub)
	m.stream.Store(&fn)
}

// stop ends every monitor stream and turns emission off, waiting for it:
// the agent must not exit with the programs emitting for no one (the
// flag outlives it, in its pin).
func (m *verdictMonitor) stop() {
	if hub := m.hub.Load(); hub != nil {
		hub.Stop()
	}
}

// serve is the server.Monitor of the API.
func (m *verdictMonitor) serve(ctx context.Context, req api.MonitorRequest, ready func() error, send func(api.Verdict) error) error {
	fn := m.stream.Load()
	if fn == nil {
		return api.Errorf(api.CodeNotAvailable, "this agent reports no verdict events yet: %v, or its dataplane is still loading", verdicts.ErrNoEvents)
	}
	return (*fn)(ctx, req, ready, send)
}

// storeNamer names events from the agent's store: the pod of a host
// interface, the label set of an identity, and the datapath's rule ids.
// It runs for every event a monitor reads, so each name is one lookup:
// the interface from what the datapath attached, the pod and the
// identity by an index of the store.
type storeNamer struct {
	dp ebpfDataplane
	st *store.Store
}

func (s storeNamer) Endpoint(ifindex uint32) string {
	name, ok := s.dp.HostInterface(ifindex)
	if !ok {
		return ""
	}
	ep, err := store.EndpointByHostIf(s.st.ReadTxn(), nil, name)
	if err != nil || ep == nil || ep.Pod.Name == "" {
		return name
	}
	return ep.Pod.Namespace + "/" + ep.Pod.Name
}

func (s storeNamer) Peer(id uint32) string {
	x, err := store.IdentityByID(s.st.ReadTxn(), nil, policyapi.Peer(id))
	if err != nil || x == nil {
		return ""
	}
	return labelSet(x.Key)
}

// Isolators makes storeNamer a verdicts.IsolatorsNamer.
func (s storeNamer) Isolators(ifindex uint32, dir uint8) []string {
	return s.dp.Isolators(ifindex, dir)
}

func (s storeNamer) Rule(id uint32) (policy.RuleOrigin, bool) { return s.dp.RuleOrigin(id) }

// RuleIDsExhausted makes storeNamer a verdicts.RuleIDsReporter.
func (s storeNamer) RuleIDsExhausted() bool { return s.dp.RuleIDsExhausted() }

// labelSet shortens an identity key (ns="team" nsl={...} l={...} p=...)
// to what a reader needs: the namespace and the pod's labels,
// team/{"app":"web"}.
func labelSet(key string) string {
	rest, ok := strings.CutPrefix(key, `ns=`)
	if !ok {
		return key
	}
	ns, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return key
	}
	ns, _ = strconv.Unquote(ns)
	_, labels, ok := strings.Cut(rest, " l=")
	if !ok {
		return key
	}
	if i := strings.LastIndex(labels, " p="); i >= 0 {
		labels = labels[:i]
	}
	return ns + "/" + labels
}
