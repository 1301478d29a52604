package dashboard

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

var (
	// What a PromQL expression holds besides metric names: strings,
	// label matchers, ranges, Grafana's variables and label lists.
	promqlStrings  = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promqlMatchers = regexp.MustCompile(`\{[^}]*\}`)
	promqlRanges   = regexp.MustCompile(`\[[^\]]*\]`)
	grafanaVars    = regexp.MustCompile(`\$\{[^}]*\}|\$\w+`)
	promqlLabels   = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	// A number or duration first, so that 1e3 or 5m is not read as a name.
	promqlTokens = regexp.MustCompile(`[0-9][0-9A-Za-z_.+]*|[A-Za-z_:][A-Za-z0-9_:]*(\s*\()?`)
)

// promqlKeywords are PromQL's words that are neither functions nor names.
var promqlKeywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset", "inf", "nan", "Inf", "NaN"}

// metricNames returns the metric names an expression selects, in order.
func metricNames(expr string) []string {
	for _, re := range []*regexp.Regexp{promqlStrings, promqlMatchers, promqlRanges, grafanaVars, promqlLabels} {
		expr = re.ReplaceAllString(expr, " ")
	}
	var names []string
	for _, tok := range promqlTokens.FindAllString(expr, -1) {
		if tok[0] >= '0' && tok[0] <= '9' || strings.HasSuffix(tok, "(") || slices.Contains(promqlKeywords, tok) {
			continue // a number, a function call, a keyword
		}
		if !slices.Contains(names, tok) {
			names = append(names, tok)
		}
	}
	return names
}

// labelValuesQuery reads Grafana's label_values(EXPR, LABEL) variable
// query and returns EXPR.
func labelValuesQuery(q string) (string, bool) {
	q = strings.TrimSpace(q)
	if !strings.HasPrefix(q, "label_values(") || !strings.HasSuffix(q, ")") {
		return "", false
	}
	inner := strings.TrimSuffix(strings.TrimPrefix(q, "label_values("), ")")
	i := strings.LastIndex(inner, ",")
	if i < 0 {
		return inner, true // label_values(LABEL): no metric
	}
	return inner[:i], true
}

func TestMetricNames(t *testing.T) {
	tests := []struct {
		expr string
		want []string
	}{
		{`sum by (reason) (rate(lockstep_datapath_packets_total{instance=~"$instance", reason!="allowed-new"}[$__rate_interval]))`, []string{"lockstep_datapath_packets_total"}},
		{`histogram_quantile(0.99, sum by (le) (rate(lockstep_api_request_duration_seconds_bucket[5m])))`, []string{"lockstep_api_request_duration_seconds_bucket"}},
		{`process_resident_memory_bytes and on (instance) lockstep_operator_leader`, []string{"process_resident_memory_bytes", "lockstep_operator_leader"}},
		{`time() - process_start_time_seconds{job="x"} offset 5m > 1e3`, []string{"process_start_time_seconds"}},
		{`a / ignoring(state) group_left b > bool 0`, []string{"a", "b"}},
		{`sum(rate(x_total[${__range}])) or vector(0)`, []string{"x_total"}},
	}
	for _, tt := range tests {
		if got := metricNames(tt.expr); !slices.Equal(got, tt.want) {
			t.Errorf("metricNames(%q) = %q, want %q", tt.expr, got, tt.want)
		}
	}
	if q, ok := labelValuesQuery("label_values(lockstep_dataplane_info, instance)"); !ok || q != "lockstep_dataplane_info" {
		t.Errorf("labelValuesQuery = %q, %v", q, ok)
	}
}
