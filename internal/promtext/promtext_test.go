package promtext

import (
	"io"
	"strings"
	"testing"
)

func TestWrite(t *testing.T) {
	r := NewRegistry()
	reqs := r.NewCounter("lockstep_requests_total", "Requests by op.", "op", "code")
	reqs.Inc("add", "0")
	reqs.Inc("add", "0")
	reqs.Inc("del", "100")
	lat := r.NewHistogram("lockstep_latency_seconds", "Latency.\nSecond line.", []float64{0.001, 0.01, 0.1}, "op")
	for _, v := range []float64{0.0005, 0.001, 0.005, 0.5} {
		lat.Observe(v, "add")
	}
	r.NewCounter("lockstep_unused_total", "Never touched.")
	r.RegisterWriter(func(w io.Writer) {
		WriteHeader(w, "lockstep_pool_addresses", "Addresses by state.", "gauge")
		WriteSample(w, "lockstep_pool_addresses", 3, "pool", `a"b`, "state", "free")
	})

	var b strings.Builder
	r.Write(&b)
	want := `# HELP lockstep_latency_seconds Latency.\nSecond line.
# TYPE lockstep_latency_seconds histogram
lockstep_latency_seconds_bucket{op="add",le="0.001"} 2
lockstep_latency_seconds_bucket{op="add",le="0.01"} 3
lockstep_latency_seconds_bucket{op="add",le="0.1"} 3
lockstep_latency_seconds_bucket{op="add",le="+Inf"} 4
lockstep_latency_seconds_sum{op="add"} 0.5065
lockstep_latency_seconds_count{op="add"} 4
# HELP lockstep_requests_total Requests by op.
# TYPE lockstep_requests_total counter
lockstep_requests_total{op="add",code="0"} 2
lockstep_requests_total{op="del",code="100"} 1
# HELP lockstep_pool_addresses Addresses by state.
# TYPE lockstep_pool_addresses gauge
lockstep_pool_addresses{pool="a\"b",state="free"} 3
`
	if got := b.String(); got != want {
		t.Fatalf("exposition:\n%s\nwant:\n%s", got, want)
	}
}

func TestWrongLabelCountPanics(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic for a missing label value")
		}
	}()
	NewRegistry().NewCounter("c_total", "c", "op").Inc()
}
