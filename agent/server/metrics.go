package server

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"lockstep.dev/lockstep/agent/api"
)

// Metrics are the agent's Prometheus metrics, on a registry of their own.
type Metrics struct {
	Registry  *prometheus.Registry
	requests  *prometheus.CounterVec
	durations *prometheus.HistogramVec
	writes    prometheus.Histogram
}

// NewMetrics registers the agent's metrics. status feeds the pool gauges at
// scrape time, so they always show committed state.
func NewMetrics(status func(context.Context) (*api.StatusResponse, error)) *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "lockstep_api_requests_total",
			Help: "CNI API requests served, by path and result code (0 = success).",
		}, []string{"path", "code"}),
		durations: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "lockstep_api_request_duration_seconds",
			Help:    "Time the agent spent on a CNI API request.",
			Buckets: prometheus.ExponentialBuckets(50e-6, 2, 16),
		}, []string{"path"}),
		writes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "lockstep_state_write_duration_seconds",
			Help:    "Time to write one transaction's durable changes to the state file (fsync included).",
			Buckets: prometheus.ExponentialBuckets(25e-6, 2, 16),
		}),
	}
	m.Registry.MustRegister(m.requests, m.durations, m.writes,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		poolCollector{status: status})
	return m
}

func (m *Metrics) observeRequest(path string, code int, d time.Duration) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(path, strconv.Itoa(code)).Inc()
	m.durations.WithLabelValues(path).Observe(d.Seconds())
}

// ObserveWrite records one durable write.
func (m *Metrics) ObserveWrite(d time.Duration) { m.writes.Observe(d.Seconds()) }

var poolDesc = prometheus.NewDesc("lockstep_pool_addresses",
	"Usable addresses of each pool, by state (used, free).", []string{"pool", "state"}, nil)

type poolCollector struct {
	status func(context.Context) (*api.StatusResponse, error)
}

func (c poolCollector) Describe(ch chan<- *prometheus.Desc) { ch <- poolDesc }

func (c poolCollector) Collect(ch chan<- prometheus.Metric) {
	st, err := c.status(context.Background())
	if err != nil {
		ch <- prometheus.NewInvalidMetric(poolDesc, err)
		return
	}
	for _, p := range st.Pools {
		ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(p.Used), p.Name, "used")
		ch <- prometheus.MustNewConstMetric(poolDesc, prometheus.GaugeValue, float64(p.Free), p.Name, "free")
	}
}

// OpsHandler serves /healthz and /metrics. healthy reports whether the
// agent can serve CNI requests.
func OpsHandler(m *Metrics, healthy func(context.Context) error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if err := healthy(r.Context()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}
