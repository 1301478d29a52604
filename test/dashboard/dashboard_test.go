package dashboard

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"testing"
)

// dashboardFile is the dashboard deploy/README.md documents.
const dashboardFile = "../../deploy/grafana/lockstep-dashboard.json"

// codeDirs are the folders whose code writes the agent's and the
// operator's metrics.
var codeDirs = []string{"../../internal", "../../bpfmaps", "../../kube", "../../agent"}

// noPanel are metric families the dashboard leaves out on purpose, each
// with the reason. Every other family the code writes needs a panel.
var noPanel = map[string]string{
	// Go's heap in use says little the resident memory panel does not.
	"go_memstats_heap_inuse_bytes": "the memory panels show process_resident_memory_bytes",
}

// panel is the part of a Grafana panel the test reads.
type panel struct {
	ID         int         `json:"id"`
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Datasource *datasource `json:"datasource"`
	Targets    []target    `json:"targets"`
	Panels     []panel     `json:"panels"` // a collapsed row's
}

type target struct {
	Expr       string      `json:"expr"`
	Datasource *datasource `json:"datasource"`
}

type datasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

// dashboard is the part of the dashboard the test reads.
type dashboard struct {
	Title      string  `json:"title"`
	UID        string  `json:"uid"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string      `json:"name"`
			Type       string      `json:"type"`
			Query      any         `json:"query"`
			Datasource *datasource `json:"datasource"`
		} `json:"list"`
	} `json:"templating"`
}

// query is one PromQL expression of the dashboard and where it is.
type query struct{ where, expr string }

// readDashboard parses the dashboard and returns its PromQL expressions,
// with what is wrong with its structure.
func readDashboard(t *testing.T) ([]query, []string) {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("parse %s: %v", dashboardFile, err)
	}
	var problems []string
	if d.Title == "" || d.UID == "" {
		problems = append(problems, "the dashboard needs a title and a uid (links and provisioning find it by uid)")
	}
	// The data source is a variable, not an import-time input: an
	// import asks for it and a provisioned file works as it is.
	hasDS := false
	for _, v := range d.Templating.List {
		hasDS = hasDS || v.Name == "DS_PROMETHEUS" && v.Type == "datasource" && v.Query == "prometheus"
	}
	if !hasDS {
		problems = append(problems, "no variable DS_PROMETHEUS of type datasource (query prometheus): the panels' data source must be chosen, not fixed")
	}
	promDS := func(ds *datasource) bool { return ds != nil && ds.Type == "prometheus" && ds.UID == "${DS_PROMETHEUS}" }
	var queries []query
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		if !promDS(v.Datasource) {
			problems = append(problems, fmt.Sprintf("variable %s: data source %+v, want ${DS_PROMETHEUS}", v.Name, v.Datasource))
		}
		q, _ := v.Query.(string)
		if m, ok := v.Query.(map[string]any); ok {
			q, _ = m["query"].(string)
		}
		expr, ok := labelValuesQuery(q)
		if !ok {
			problems = append(problems, fmt.Sprintf("variable %s: query %q is not label_values(...)", v.Name, q))
			continue
		}
		queries = append(queries, query{"variable " + v.Name, expr})
	}
	ids := map[int]string{}
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			if other, dup := ids[p.ID]; dup {
				problems = append(problems, fmt.Sprintf("panels %q and %q share id %d", other, p.Title, p.ID))
			}
			ids[p.ID] = p.Title
			walk(p.Panels)
			if p.Type == "row" {
				continue
			}
			if len(p.Targets) == 0 {
				problems = append(problems, fmt.Sprintf("panel %q has no query", p.Title))
			}
			if !promDS(p.Datasource) {
				problems = append(problems, fmt.Sprintf("panel %q: data source %+v, want ${DS_PROMETHEUS}", p.Title, p.Datasource))
			}
			for _, tg := range p.Targets {
				if tg.Datasource != nil && !promDS(tg.Datasource) {
					problems = append(problems, fmt.Sprintf("panel %q: a query's data source %+v, want ${DS_PROMETHEUS}", p.Title, tg.Datasource))
				}
				if strings.TrimSpace(tg.Expr) == "" {
					problems = append(problems, fmt.Sprintf("panel %q: an empty query", p.Title))
				}
				queries = append(queries, query{fmt.Sprintf("panel %q", p.Title), tg.Expr})
			}
		}
	}
	walk(d.Panels)
	return queries, problems
}

// familyOf is the family a sample name belongs to: itself, or for a
// histogram's _bucket, _sum and _count series the histogram.
func familyOf(fams map[string]family, sample string) (string, bool) {
	if _, ok := fams[sample]; ok {
		return sample, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(sample, suffix); ok && fams[base].typ == "histogram" {
			return base, true
		}
	}
	return "", false
}

// TestDashboardMatchesMetrics: every metric the dashboard queries is one
// the code writes, and every family the code writes has a panel (or a
// reason in noPanel not to).
func TestDashboardMatchesMetrics(t *testing.T) {
	fams, err := writtenFamilies(codeDirs...)
	if err != nil {
		t.Fatal(err)
	}
	queries, problems := readDashboard(t)
	for _, p := range problems {
		t.Error(p)
	}
	shown := map[string]bool{}
	for _, q := range queries {
		names := metricNames(q.expr)
		if len(names) == 0 {
			t.Errorf("%s: query %q selects no metric", q.where, q.expr)
		}
		for _, n := range names {
			f, ok := familyOf(fams, n)
			if !ok {
				t.Errorf("%s: %s is not a metric lockstep writes (query %q); was it renamed or removed?", q.where, n, q.expr)
				continue
			}
			shown[f] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(fams)) {
		_, skip := noPanel[name]
		switch {
		case !shown[name] && !skip:
			t.Errorf("%s (%s, written at %s) has no panel in %s: add one, or say in noPanel why not", name, fams[name].typ, fams[name].at, dashboardFile)
		case shown[name] && skip:
			t.Errorf("%s has a panel but is in noPanel: take it out of noPanel", name)
		}
	}
	for name := range noPanel {
		if _, ok := fams[name]; !ok {
			t.Errorf("noPanel lists %s, which the code no longer writes", name)
		}
	}
	t.Logf("%d queries over %d of the %d families the code writes", len(queries), len(shown), len(fams))
}
