package probe

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

func ptr(b bool) *bool { return &b }

// sampleReport is three pods in two namespaces; y/a denies x/a and x/b on
// 80/TCP, x/b's UDP port could not be probed from y/a.
func sampleReport() *Report {
	tcp80 := Port{80, TCP}
	udp53 := Port{53, UDP}
	r := &Report{
		Pods: []PodInfo{
			{Namespace: "y", Name: "a", IP: "10.244.0.3", Ports: []Port{tcp80}},
			{Namespace: "x", Name: "b", IP: "10.244.0.2", Ports: []Port{udp53, tcp80}},
			{Namespace: "x", Name: "a", IP: "10.244.0.1", Ports: []Port{tcp80}},
		},
	}
	add := func(from, to string, p Port, allowed *bool, errText string) {
		r.Results = append(r.Results, Result{From: from, To: to, Port: p.Port, Protocol: p.Protocol, Allowed: allowed, Error: errText})
	}
	add("y/a", "x/b", udp53, nil, "boom")
	add("y/a", "x/b", tcp80, ptr(false), "")
	add("y/a", "x/a", tcp80, ptr(false), "")
	add("x/b", "y/a", tcp80, ptr(true), "")
	add("x/b", "x/a", tcp80, ptr(true), "")
	add("x/a", "y/a", tcp80, ptr(false), "")
	add("x/a", "x/b", udp53, ptr(true), "")
	add("x/a", "x/b", tcp80, ptr(true), "")
	return r
}

const sampleTable = `80/TCP  x/a  x/b  y/a
x/a     -    .    X
x/b     .    -    .
y/a     X    X    -

53/UDP  x/b
x/a     .
x/b     -
y/a     ?
`

func TestTableFormat(t *testing.T) {
	got := sampleReport().Table().String()
	if got != sampleTable {
		t.Errorf("table:\n%s\nwant:\n%s", got, sampleTable)
	}
	for i, line := range strings.Split(got, "\n") {
		if strings.TrimRight(line, " ") != line {
			t.Errorf("line %d has trailing spaces: %q", i+1, line)
		}
	}
}

func TestTableBlockOrder(t *testing.T) {
	r := &Report{Pods: []PodInfo{
		{Namespace: "n", Name: "a", Ports: []Port{{9, SCTP}, {443, TCP}, {53, UDP}, {80, TCP}, {80, UDP}}},
		{Namespace: "n", Name: "b"},
	}}
	var got []string
	for _, b := range r.Table().Blocks {
		got = append(got, b.Port.String())
	}
	want := []string{"80/TCP", "443/TCP", "53/UDP", "80/UDP", "9/SCTP"}
	if !slices.Equal(got, want) {
		t.Errorf("block order %v, want %v", got, want)
	}
}

func TestParseTableRoundTrip(t *testing.T) {
	parsed, err := ParseTable(sampleTable)
	if err != nil {
		t.Fatal(err)
	}
	if got := parsed.String(); got != sampleTable {
		t.Errorf("round trip:\n%s\nwant:\n%s", got, sampleTable)
	}
	if ms := CompareTables(parsed, sampleReport().Table()); len(ms) != 0 {
		t.Errorf("a table compared with itself mismatches: %v", ms)
	}
	if n := parsed.Count(CellUnprobeable); n != 1 {
		t.Errorf("Count(?) = %d, want 1", n)
	}
}

func TestParseTableErrors(t *testing.T) {
	for name, text := range map[string]string{
		"bad heading":    "TCP  x/a\nx/a  -\n",
		"bad protocol":   "80/ICMP  x/a\nx/a  -\n",
		"short row":      "80/TCP  x/a  x/b\nx/a  -\n",
		"bad cell":       "80/TCP  x/a\nx/a  Y\n",
		"duplicate row":  "80/TCP  x/a\nx/a  -\nx/a  -\n",
		"duplicate col":  "80/TCP  x/a  x/a\nx/a  -  -\n",
		"duplicate port": "80/TCP  x/a\nx/a  -\n\n80/TCP  x/a\nx/a  -\n",
	} {
		if _, err := ParseTable(text); err == nil {
			t.Errorf("%s: ParseTable accepted %q", name, text)
		}
	}
}

func TestParseTableCommentsAndOrder(t *testing.T) {
	// Hand-written tables may carry comments and list rows and columns in
	// any order: cells are matched by name.
	text := "# y/a isolates ingress\n80/TCP  y/a  x/b  x/a\ny/a  -  X  X\nx/b  .  -  .\nx/a  X  .  -\n\n\n53/UDP  x/b\nx/b  -\nx/a  .\ny/a  .\n"
	exp, err := ParseTable(text)
	if err != nil {
		t.Fatal(err)
	}
	if ms := CompareTables(exp, sampleReport().Table()); len(ms) != 0 {
		t.Errorf("mismatches: %v", ms)
	}
}

func TestCompareTables(t *testing.T) {
	actual := sampleReport().Table()
	for _, tc := range []struct {
		name     string
		expected string
		want     []string
	}{
		{"equal", sampleTable, nil},
		{
			"one cell differs",
			strings.Replace(sampleTable, "x/b     .    -    .", "x/b     .    -    X", 1),
			[]string{"80/TCP x/b -> y/a: expected X, got ."},
		},
		{
			"actual ? matches anything",
			strings.Replace(sampleTable, "y/a     ?", "y/a     X", 1),
			nil,
		},
		{
			"block missing from actual",
			sampleTable + "\n8080/TCP  x/a\nx/a  -\ny/a  .\n",
			[]string{"8080/TCP x/a -> x/a: expected -, got no such cell", "8080/TCP y/a -> x/a: expected ., got no such cell"},
		},
		{
			"block missing from expected",
			"80/TCP  x/a  x/b  y/a\nx/a     -    .    X\nx/b     .    -    .\ny/a     X    X    -\n",
			[]string{"53/UDP x/a -> x/b: expected no such cell, got .", "53/UDP x/b -> x/b: expected no such cell, got -", "53/UDP y/a -> x/b: expected no such cell, got ?"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp, err := ParseTable(tc.expected)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range CompareTables(exp, actual) {
				got = append(got, m.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("mismatches:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestReportJSONShape(t *testing.T) {
	r := sampleReport()
	r.Sort()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var generic struct {
		Pods    []map[string]any `json:"pods"`
		Results []map[string]any `json:"results"`
	}
	if err := json.Unmarshal(b, &generic); err != nil {
		t.Fatal(err)
	}
	first := generic.Pods[0]
	if first["namespace"] != "x" || first["name"] != "a" || first["ip"] != "10.244.0.1" {
		t.Errorf("first pod %v, want x/a 10.244.0.1", first)
	}
	wantFirst := map[string]any{"from": "x/a", "to": "x/b", "port": float64(80), "protocol": "TCP", "allowed": true}
	if got := generic.Results[0]; !mapsEqual(got, wantFirst) {
		t.Errorf("first result %v, want %v", got, wantFirst)
	}
	// An unprobeable result has "allowed": null (present, not omitted) and
	// an error.
	last := generic.Results[len(generic.Results)-1]
	if v, ok := last["allowed"]; !ok || v != nil || last["error"] != "boom" {
		t.Errorf("unprobeable result %v, want allowed null and error", last)
	}
	if _, ok := generic.Results[0]["error"]; ok {
		t.Errorf("a probed result carries an error field: %v", generic.Results[0])
	}
}

func mapsEqual(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestReportSortOrder(t *testing.T) {
	r := &Report{Results: []Result{
		{From: "b/a", To: "a/a", Port: 80, Protocol: UDP},
		{From: "a-b/a", To: "a/a", Port: 80, Protocol: TCP},
		{From: "a/z", To: "b/a", Port: 9, Protocol: SCTP},
		{From: "a/z", To: "b/a", Port: 443, Protocol: TCP},
		{From: "a/z", To: "b/a", Port: 80, Protocol: UDP},
		{From: "a/z", To: "b/a", Port: 80, Protocol: TCP},
		{From: "a/z", To: "a/b", Port: 80, Protocol: TCP},
	}}
	r.Sort()
	var got []string
	for _, res := range r.Results {
		got = append(got, res.From+">"+res.To+" "+Port{res.Port, res.Protocol}.String())
	}
	want := []string{
		"a/z>a/b 80/TCP",
		"a/z>b/a 80/TCP",
		"a/z>b/a 443/TCP",
		"a/z>b/a 80/UDP",
		"a/z>b/a 9/SCTP",
		"a-b/a>a/a 80/TCP", // namespace "a" sorts before "a-b"
		"b/a>a/a 80/UDP",
	}
	if !slices.Equal(got, want) {
		t.Errorf("order:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestNormalisePorts(t *testing.T) {
	got := normalisePorts([]Port{{80, ""}, {80, TCP}, {53, UDP}, {53, TCP}})
	want := []Port{{53, TCP}, {80, TCP}, {53, UDP}}
	if !slices.Equal(got, want) {
		t.Errorf("normalisePorts = %v, want %v", got, want)
	}
}

// sampleServiceReport adds, to sampleReport, probes through two Services:
// x/web (80/TCP) and y/dns (53/UDP, 53/TCP).
func sampleServiceReport() *Report {
	r := sampleReport()
	r.Via = ViaBoth
	r.Services = []ServiceInfo{
		{Namespace: "y", Name: "dns", IP: "10.96.0.10", Ports: []Port{{53, UDP}, {53, TCP}}},
		{Namespace: "x", Name: "web", IP: "10.96.0.20", Ports: []Port{{80, TCP}}},
	}
	add := func(from, svc string, p Port, o Outcome) {
		r.ServiceResults = append(r.ServiceResults, ServiceResult{From: from, Service: svc, Port: p.Port, Protocol: p.Protocol, Outcome: o})
	}
	for _, from := range []string{"y/a", "x/b", "x/a"} {
		add(from, "y/dns", Port{53, UDP}, OutcomeAllowed)
	}
	add("x/a", "x/web", Port{80, TCP}, OutcomePartial)
	add("x/b", "x/web", Port{80, TCP}, OutcomeAllowed)
	add("y/a", "x/web", Port{80, TCP}, OutcomeDenied)
	add("x/a", "y/dns", Port{53, TCP}, OutcomeRefused)
	add("x/b", "y/dns", Port{53, TCP}, OutcomeUnprobeable)
	// y/a -> y/dns 53/TCP is missing: '?'.
	return r
}

const sampleServiceTable = sampleTable + `
svc:53/TCP  y/dns
x/a         R
x/b         ?
y/a         ?

svc:80/TCP  x/web
x/a         ~
x/b         .
y/a         X

svc:53/UDP  y/dns
x/a         .
x/b         .
y/a         .
`

func TestServiceTableFormat(t *testing.T) {
	r := sampleServiceReport()
	if got := r.Table().String(); got != sampleServiceTable {
		t.Errorf("table:\n%s\nwant:\n%s", got, sampleServiceTable)
	}
	r.Via = ViaService
	want := strings.TrimPrefix(sampleServiceTable, sampleTable+"\n")
	if got := r.Table().String(); got != want {
		t.Errorf("table through Services only:\n%s\nwant:\n%s", got, want)
	}
	r.Via = ViaPodIP
	if got := r.Table().String(); got != sampleTable {
		t.Errorf("table by pod address only:\n%s\nwant:\n%s", got, sampleTable)
	}
}

func TestServiceTableParseAndCompare(t *testing.T) {
	parsed, err := ParseTable(sampleServiceTable)
	if err != nil {
		t.Fatal(err)
	}
	if got := parsed.String(); got != sampleServiceTable {
		t.Errorf("round trip:\n%s\nwant:\n%s", got, sampleServiceTable)
	}
	actual := sampleServiceReport().Table()
	if ms := CompareTables(parsed, actual); len(ms) != 0 {
		t.Errorf("a table compared with itself mismatches: %v", ms)
	}
	for _, tc := range []struct {
		name     string
		old, new string
		want     []string
	}{
		{"partial expected allowed", "x/a         ~", "x/a         .", []string{"svc:80/TCP x/a -> x/web: expected ., got ~"}},
		{"refused expected denied", "x/a         R", "x/a         X", []string{"svc:53/TCP x/a -> y/dns: expected X, got R"}},
		// The pod block 53/UDP x/b and the Service block svc:53/UDP are
		// different cells: a change in one is not matched by the other.
		{"service block apart from pod block", "svc:53/UDP  y/dns\nx/a         .", "svc:53/UDP  y/dns\nx/a         X", []string{"svc:53/UDP x/a -> y/dns: expected X, got ."}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			text := strings.Replace(sampleServiceTable, tc.old, tc.new, 1)
			if text == sampleServiceTable {
				t.Fatalf("%q is not in the sample", tc.old)
			}
			exp, err := ParseTable(text)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, m := range CompareTables(exp, actual) {
				got = append(got, m.String())
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("mismatches:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestParseTableServiceCells(t *testing.T) {
	for name, tc := range map[string]struct {
		text string
		ok   bool
	}{
		"service marks":           {"svc:80/TCP  x/web\nx/a  ~\nx/b  R\nx/c  .\nx/d  X\nx/e  ?\n", true},
		"self in a service block": {"svc:80/TCP  x/web\nx/a  -\n", false},
		"partial by pod address":  {"80/TCP  x/a\nx/b  ~\n", false},
		"refused by pod address":  {"80/TCP  x/a\nx/b  R\n", false},
		"bad service heading":     {"svc:80  x/web\nx/a  .\n", false},
		"second service block":    {"svc:80/TCP  x/web\nx/a  .\n\nsvc:80/TCP  x/api\nx/a  .\n", false},
		"pod and service block":   {"80/TCP  x/a\nx/a  -\n\nsvc:80/TCP  x/web\nx/a  .\n", true},
	} {
		_, err := ParseTable(tc.text)
		if (err == nil) != tc.ok {
			t.Errorf("%s: ParseTable error %v, want ok %v", name, err, tc.ok)
		}
	}
}

func TestServiceReportJSON(t *testing.T) {
	r := sampleServiceReport()
	r.ServiceResults[3].Attempts, r.ServiceResults[3].Answered, r.ServiceResults[3].Dropped = 2, 1, 1
	r.ServiceResults[3].Backends = []string{"x/b"}
	r.Sort()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var generic struct {
		Via            string           `json:"via"`
		Services       []map[string]any `json:"services"`
		ServiceResults []map[string]any `json:"serviceResults"`
	}
	if err := json.Unmarshal(b, &generic); err != nil {
		t.Fatal(err)
	}
	if generic.Via != ViaBoth || len(generic.Services) != 2 || generic.Services[0]["name"] != "web" || generic.Services[0]["ip"] != "10.96.0.20" {
		t.Errorf("via %q, services %v: want both, x/web first at 10.96.0.20", generic.Via, generic.Services)
	}
	want := map[string]any{"from": "x/a", "service": "x/web", "port": float64(80), "protocol": "TCP", "outcome": "partial",
		"attempts": float64(2), "answered": float64(1), "refused": float64(0), "dropped": float64(1), "backends": []any{"x/b"}}
	got := generic.ServiceResults[0]
	if len(got) != len(want) || !slices.Equal(got["backends"].([]any), want["backends"].([]any)) {
		t.Fatalf("first service result %v, want %v", got, want)
	}
	delete(got, "backends")
	delete(want, "backends")
	if !mapsEqual(got, want) {
		t.Errorf("first service result %v, want %v", got, want)
	}
	// A report by pod address only has no Service fields at all.
	plain, err := json.Marshal(sampleReport())
	if err != nil {
		t.Fatal(err)
	}
	for _, field := range []string{`"via"`, `"services"`, `"serviceResults"`} {
		if strings.Contains(string(plain), field) {
			t.Errorf("a report by pod address carries %s: %s", field, plain)
		}
	}
}
