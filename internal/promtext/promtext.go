package promtext

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Registry holds metric families and writes them in name order.
type Registry struct {
	mu       sync.Mutex
	families map[string]*family
	writers  []func(w io.Writer)
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{families: map[string]*family{}} }

type family struct {
	name, help, typ string
	labels          []string
	buckets         []float64 // histograms only

	mu     sync.Mutex
	series map[string]*series // by rendered label set
}

type series struct {
	labels string // `{a="x",b="y"}` or ""
	value  float64
	counts []uint64 // histograms: per bucket, not cumulative
	count  uint64
	sum    float64
}

func (r *Registry) register(name, help, typ string, labels []string, buckets []float64) *family {
	r.mu.Lock()
	defer r.mu.Unlock()
	if f, ok := r.families[name]; ok {
		return f
	}
	f := &family{name: name, help: help, typ: typ, labels: labels, buckets: buckets, series: map[string]*series{}}
	r.families[name] = f
	return f
}

// Counter is a family of monotonic counters.
type Counter struct{ f *family }

// NewCounter registers a counter family with the given label names.
func (r *Registry) NewCounter(name, help string, labels ...string) *Counter {
	return &Counter{r.register(name, help, "counter", labels, nil)}
}

// Add adds v (which must not be negative) to the series of the label
// values, given in the order of the family's label names.
func (c *Counter) Add(v float64, values ...string) {
	c.f.with(values, func(s *series) { s.value += v })
}

// Inc adds one.
func (c *Counter) Inc(values ...string) { c.Add(1, values...) }

// Histogram is a family of histograms with fixed bucket upper bounds.
type Histogram struct{ f *family }

// NewHistogram registers a histogram family. buckets are the upper bounds,
// ascending; +Inf is implied.
func (r *Registry) NewHistogram(name, help string, buckets []float64, labels ...string) *Histogram {
	return &Histogram{r.register(name, help, "histogram", labels, slices.Clone(buckets))}
}

// Observe records one value.
func (h *Histogram) Observe(v float64, values ...string) {
	h.f.with(values, func(s *series) {
		if s.counts == nil {
			s.counts = make([]uint64, len(h.f.buckets))
		}
		if i, _ := slices.BinarySearch(h.f.buckets, v); i < len(h.f.buckets) {
			s.counts[i]++
		}
		s.count++
		s.sum += v
	})
}

// ExponentialBuckets returns n histogram upper bounds: start, then each
// factor times the one before.
func ExponentialBuckets(start, factor float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = start
		start *= factor
	}
	return out
}

// RegisterWriter adds a function called on every scrape to write metrics
// that are computed then (gauges of committed state, process metrics).
func (r *Registry) RegisterWriter(fn func(w io.Writer)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.writers = append(r.writers, fn)
}

func (f *family) with(values []string, fn func(*series)) {
	if len(values) != len(f.labels) {
		panic(fmt.Sprintf("promtext: %s takes %d label values, got %d", f.name, len(f.labels), len(values)))
	}
	key := renderLabels(f.labels, values)
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.series[key]
	if !ok {
		s = &series{labels: key}
		f.series[key] = s
	}
	fn(s)
}

// Write writes every family, then every registered writer's output.
func (r *Registry) Write(w io.Writer) {
	r.mu.Lock()
	names := make([]string, 0, len(r.families))
	for n := range r.families {
		names = append(names, n)
	}
	families := r.families
	writers := slices.Clone(r.writers)
	r.mu.Unlock()
	slices.Sort(names)
	var b strings.Builder
	for _, n := range names {
		families[n].write(&b)
	}
	_, _ = io.WriteString(w, b.String())
	for _, fn := range writers {
		fn(w)
	}
}

func (f *family) write(b *strings.Builder) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.series) == 0 {
		return
	}
	WriteHeader(b, f.name, f.help, f.typ)
	keys := make([]string, 0, len(f.series))
	for k := range f.series {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		s := f.series[k]
		if f.typ != "histogram" {
			fmt.Fprintf(b, "%s%s %s\n", f.name, s.labels, formatFloat(s.value))
			continue
		}
		var cum uint64
		for i, le := range f.buckets {
			if s.counts != nil {
				cum += s.counts[i]
			}
			fmt.Fprintf(b, "%s_bucket%s %d\n", f.name, withLabel(s.labels, "le", formatFloat(le)), cum)
		}
		fmt.Fprintf(b, "%s_bucket%s %d\n", f.name, withLabel(s.labels, "le", "+Inf"), s.count)
		fmt.Fprintf(b, "%s_sum%s %s\n", f.name, s.labels, formatFloat(s.sum))
		fmt.Fprintf(b, "%s_count%s %d\n", f.name, s.labels, s.count)
	}
}

// WriteHeader writes the HELP and TYPE lines of a family.
func WriteHeader(w io.Writer, name, help, typ string) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", name, escapeHelp(help), name, typ)
}

// WriteSample writes one sample line; labels alternate names and values.
func WriteSample(w io.Writer, name string, value float64, labels ...string) {
	names, values := make([]string, 0, len(labels)/2), make([]string, 0, len(labels)/2)
	for i := 0; i+1 < len(labels); i += 2 {
		names, values = append(names, labels[i]), append(values, labels[i+1])
	}
	fmt.Fprintf(w, "%s%s %s\n", name, renderLabels(names, values), formatFloat(value))
}

func renderLabels(names, values []string) string {
	if len(names) == 0 {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(n)
		b.WriteString(`="`)
		b.WriteString(escapeValue(values[i]))
		b.WriteByte('"')
	}
	b.WriteByte('}')
	return b.String()
}

func withLabel(labels, name, value string) string {
	pair := name + `="` + value + `"`
	if labels == "" {
		return "{" + pair + "}"
	}
	return labels[:len(labels)-1] + "," + pair + "}"
}

var (
	valueEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

func escapeValue(s string) string { return valueEscaper.Replace(s) }
func escapeHelp(s string) string  { return helpEscaper.Replace(s) }

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
