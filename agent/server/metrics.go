package server

import (
	"context"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
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
		durations: reg.NewHistogram("lockstep_api_request_duration_seconds",
			"Time the agent spent on an API request.", exponential(50e-6, 2, 16), "op"),
		writes: reg.NewHistogram("lockstep_state_write_duration_seconds",
			"Time to write one transaction's durable changes to the state file, fsync included.", exponential(25e-6, 2, 16)),
		applies: reg.NewHistogram("lockstep_policy_apply_duration_seconds",
			"Time from reading a committed store snapshot to its policy being in force in the dataplane (compile and apply).", exponential(50e-6, 2, 18)),
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
	reg.RegisterWriter(writeProcessMetrics)
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

// ObserveWrite records one durable write to the state file.
func (m *Metrics) ObserveWrite(d time.Duration) { m.writes.Observe(d.Seconds()) }

// ObservePolicyApply records one dataplane apply.
func (m *Metrics) ObservePolicyApply(d time.Duration) { m.applies.Observe(d.Seconds()) }

// AddWriter adds fn, which writes metric families read at scrape time
// (dataplane counters, store gauges), to every scrape.
func (m *Metrics) AddWriter(fn func(io.Writer)) { m.reg.RegisterWriter(fn) }

// WritePrometheus writes every metric in the Prometheus text format.
func (m *Metrics) WritePrometheus(w io.Writer) { m.reg.Write(w) }

var processStart = time.Now()

// writeProcessMetrics writes the usual process and Go runtime gauges.
func writeProcessMetrics(w io.Writer) {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	gauge := func(name, help string, v float64) {
		promtext.WriteHeader(w, name, help, "gauge")
		promtext.WriteSample(w, name, v)
	}
	gauge("go_goroutines", "Number of goroutines.", float64(runtime.NumGoroutine()))
	gauge("go_memstats_heap_inuse_bytes", "Bytes in in-use heap spans.", float64(ms.HeapInuse))
	gauge("process_start_time_seconds", "Start time of the process since the Unix epoch.", float64(processStart.Unix()))
	if fds, err := os.ReadDir("/proc/self/fd"); err == nil {
		gauge("process_open_fds", "Number of open file descriptors.", float64(len(fds)))
	}
	if statm, err := os.ReadFile("/proc/self/statm"); err == nil {
		if f := strings.Fields(string(statm)); len(f) > 1 {
			if pages, err := strconv.ParseFloat(f[1], 64); err == nil {
				gauge("process_resident_memory_bytes", "Resident memory size in bytes.", pages*float64(os.Getpagesize()))
			}
		}
	}
}

// OpsHandler serves /healthz and /metrics. healthy reports whether the
// agent can serve CNI requests.
func OpsHandler(m *Metrics, healthy func(context.Context) error) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		m.WritePrometheus(w)
	})
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := healthy(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

func exponential(start, factor float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = start
		start *= factor
	}
	return out
}
