package server

import (
	"context"
	"io"
	"strconv"
	"time"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/internal/promtext"
)

// Metrics are the agent's Prometheus metrics. They are written by package
// promtext, which costs nothing at start-up (see its documentation for why
// that matters to lockstep-cni).
type Metrics struct {
	reg       *promtext.Registry
	requests  *promtext.Counter
	refused   *promtext.Counter
	durations *promtext.Histogram
	writes    *promtext.Histogram
	applies   *promtext.Histogram
}

// NewMetrics creates the agent's metrics. status feeds the pool gauges at
// scrape time, so they always show committed state.
func NewMetrics(status func(context.Context) (*api.StatusResponse, error)) *Metrics {
	reg := promtext.NewRegistry()
	m := &Metrics{
		reg: reg,
		requests: reg.NewCounter("lockstep_api_requests_total",
			"Agent API requests served, by operation and result code (0 = success).", "op", "code"),
		refused: reg.NewCounter("lockstep_api_connections_refused_total",
			"Connections to the agent API answered try-again-later and closed because MaxConns were open."),
		durations: reg.NewHistogram("lockstep_api_request_duration_seconds",
			"Time the agent spent on an API request.", promtext.ExponentialBuckets(50e-6, 2, 16), "op"),
		writes: reg.NewHistogram("lockstep_state_write_duration_seconds",
			"Time to write one transaction's durable changes to the state file, fsync included.", promtext.ExponentialBuckets(25e-6, 2, 16)),
		applies: reg.NewHistogram("lockstep_policy_apply_duration_seconds",
			"Time from reading a committed store snapshot to its policy being in force in the dataplane (compile and apply).", promtext.ExponentialBuckets(50e-6, 2, 18)),
	}
	reg.RegisterWriter(func(w io.Writer) {
		st, err := status(context.Background())
		if err != nil {
			return
		}
		promtext.WriteHeader(w, "lockstep_pool_addresses", "Usable addresses of each pool, by state (used, free).", "gauge")
		for _, p := range st.Pools {
			promtext.WriteSample(w, "lockstep_pool_addresses", float64(p.Used), "pool", p.Name, "state", "used")
			promtext.WriteSample(w, "lockstep_pool_addresses", float64(p.Free), "pool", p.Name, "state", "free")
		}
	})
	reg.RegisterWriter(promtext.WriteProcessMetrics)
	return m
}

// observeRequest counts one API request (code 0 is success) and its
// duration.
func (m *Metrics) observeRequest(op string, code int, d time.Duration) {
	if m == nil {
		return
	}
	m.requests.Inc(op, strconv.Itoa(code))
	m.durations.Observe(d.Seconds(), op)
}

// observeRefused counts one connection refused past MaxConns.
func (m *Metrics) observeRefused() {
	if m != nil {
		m.refused.Inc()
	}
}

// ObserveWrite records one durable write to the state file.
func (m *Metrics) ObserveWrite(d time.Duration) { m.writes.Observe(d.Seconds()) }

// ObservePolicyApply records one dataplane apply.
func (m *Metrics) ObservePolicyApply(d time.Duration) { m.applies.Observe(d.Seconds()) }

// AddWriter adds fn, which writes metric families read at scrape time
// (dataplane counters, store gauges), to every scrape.
func (m *Metrics) AddWriter(fn func(io.Writer)) { m.reg.RegisterWriter(fn) }

// WritePrometheus writes every metric in the Prometheus text format.
func (m *Metrics) WritePrometheus(w io.Writer) { m.reg.Write(w) }
