package verdicts

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"lockstep.dev/lockstep/agent/api"
)

// Filter selects verdicts; a zero field matches everything.
type Filter struct {
	Pod       string // "namespace/name": the endpoint or the peer
	Namespace string // the endpoint's or the peer's namespace
	Verdict   string // allow, drop or reject
	Policy    string // "namespace/name" of the rule's policy
}

// Validate checks the filter's values, in the words of the flags that
// set them.
func (f Filter) Validate() error {
	if f.Pod != "" && strings.Count(f.Pod, "/") != 1 {
		return fmt.Errorf("parse --pod %q: want NAMESPACE/NAME", f.Pod)
	}
	if f.Policy != "" && strings.Count(f.Policy, "/") != 1 {
		return fmt.Errorf("parse --policy %q: want NAMESPACE/NAME", f.Policy)
	}
	switch f.Verdict {
	case "", "allow", "drop", "reject":
	default:
		return fmt.Errorf("parse --verdict %q: want allow, drop or reject", f.Verdict)
	}
	return nil
}

// Match reports whether v passes the filter.
func (f Filter) Match(v api.Verdict) bool {
	if f.Pod != "" && v.Endpoint != f.Pod && v.Peer != f.Pod {
		return false
	}
	if f.Namespace != "" && namespaceOf(v.Endpoint) != f.Namespace && namespaceOf(v.Peer) != f.Namespace {
		return false
	}
	if f.Verdict != "" && v.Verdict != f.Verdict {
		return false
	}
	return f.Policy == "" || v.Policy == f.Policy || slices.Contains(v.Isolators, f.Policy)
}

// namespaceOf is the namespace of "namespace/name", "" for other names.
func namespaceOf(ref string) string {
	ns, _, ok := strings.Cut(ref, "/")
	if !ok || strings.Contains(ref, " ") {
		return ""
	}
	return ns
}

// flowKey is what makes two verdicts repeats of one flow: everything but
// the time, the count and the source port (a client's retries and
// parallel connections pick new ones).
type flowKey struct {
	verdict, reason, dir, endpoint, peer, proto, saddr, daddr, rule string
	dport                                                           uint16
}

func keyOf(v api.Verdict) flowKey {
	return flowKey{v.Verdict, v.Reason, v.Dir, v.Endpoint, v.Peer, v.Proto, v.Saddr, v.Daddr, v.Rule, v.Dport}
}

// Aggregator folds repeats of a flow within an interval into one verdict
// with a count. Not safe for concurrent use.
type Aggregator struct {
	interval time.Duration
	order    []flowKey
	flows    map[flowKey]*api.Verdict
	start    time.Time
}

// NewAggregator returns an aggregator over interval; 0 passes every
// verdict through alone.
func NewAggregator(interval time.Duration) *Aggregator {
	return &Aggregator{interval: interval, flows: map[flowKey]*api.Verdict{}}
}

// Add takes one verdict. With interval 0 it returns it at once; otherwise
// it returns nil and keeps it for Flush.
func (a *Aggregator) Add(v api.Verdict) []api.Verdict {
	if v.Count == 0 {
		v.Count = 1
	}
	if a.interval == 0 {
		return []api.Verdict{v}
	}
	if len(a.order) == 0 {
		a.start = v.Time
	}
	k := keyOf(v)
	if f := a.flows[k]; f != nil {
		f.Count += v.Count
		return nil
	}
	a.flows[k] = &v
	a.order = append(a.order, k)
	return nil
}

// Due reports whether the interval since the first kept verdict is over
// at now.
func (a *Aggregator) Due(now time.Time) bool {
	return a.interval > 0 && len(a.order) > 0 && now.Sub(a.start) >= a.interval
}

// Flush returns the kept flows, one verdict each in the order they first
// appeared (the time of the first, the count of all), and forgets them.
func (a *Aggregator) Flush() []api.Verdict {
	out := make([]api.Verdict, 0, len(a.order))
	for _, k := range a.order {
		out = append(out, *a.flows[k])
	}
	a.order = a.order[:0]
	clear(a.flows)
	return out
}
