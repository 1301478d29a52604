package server

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"lockstep.dev/lockstep/agent/api"
)

// Metrics are the agent's Prometheus metrics, in a set of their own.
//
// They use github.com/VictoriaMetrics/metrics rather than the Prometheus
// client library on purpose: Go runs every linked package's init on every
// start of the binary, lockstep-cni included, and the Prometheus client's
// init (default registry, Go and process collectors, protobuf descriptors)
// measured 1.2 ms of each plugin start here. This library writes the same
// text exposition format with standard `le` histogram buckets and costs
// next to nothing at start-up.
type Metrics struct {
	set *metrics.Set
}

var (
	requestBuckets = exponential(50e-6, 2, 16)
	writeBuckets   = exponential(25e-6, 2, 16)
)

// NewMetrics creates the agent's metrics. status feeds the pool gauges at
// scrape time, so they always show committed state.
func NewMetrics(status func(context.Context) (*api.StatusResponse, error)) *Metrics {
	m := &Metrics{set: metrics.NewSet()}
	m.set.RegisterMetricsWriter(func(w io.Writer) {
		st, err := status(context.Background())
		if err != nil {
			return
		}
		metrics.WriteMetadataIfNeeded(w, "lockstep_pool_addresses", "gauge")
		for _, p := range st.Pools {
			fmt.Fprintf(w, "lockstep_pool_addresses{pool=%q,state=\"used\"} %d\n", p.Name, p.Used)
			fmt.Fprintf(w, "lockstep_pool_addresses{pool=%q,state=\"free\"} %d\n", p.Name, p.Free)
		}
	})
	return m
}

// observeRequest counts one API request (code 0 is success) and its
// duration.
func (m *Metrics) observeRequest(op string, code int, d time.Duration) {
	if m == nil {
		return
	}
	m.set.GetOrCreateCounter(fmt.Sprintf(`lockstep_api_requests_total{op=%q,code="%d"}`, op, code)).Inc()
	m.set.GetOrCreatePrometheusHistogramExt(fmt.Sprintf(`lockstep_api_request_duration_seconds{op=%q}`, op), requestBuckets).Update(d.Seconds())
}

// ObserveWrite records one durable write to the state file (fsync
// included).
func (m *Metrics) ObserveWrite(d time.Duration) {
	m.set.GetOrCreatePrometheusHistogramExt("lockstep_state_write_duration_seconds", writeBuckets).Update(d.Seconds())
}

// WritePrometheus writes every metric, process and Go runtime metrics
// included, in the Prometheus text format.
func (m *Metrics) WritePrometheus(w io.Writer) {
	m.set.WritePrometheus(w)
	metrics.WriteProcessMetrics(w)
}

// OpsHandler serves /healthz and /metrics. healthy reports whether the
// agent can serve CNI requests.
func OpsHandler(m *Metrics, healthy func(context.Context) error) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
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
