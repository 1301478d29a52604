package operator

import (
	"bufio"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"lockstep.dev/lockstep/kube/apis/v1alpha1"
	"lockstep.dev/lockstep/kube/client"
)

// httpGet fetches path from an ops endpoint at addr.
func httpGet(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// sample returns the value of series (name and labels, as written) in a
// Prometheus text body, and whether it is there.
func sample(body, series string) (float64, bool) {
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

// TestReadiness: a leader is ready once its informers have listed, a
// standby once it has read the Lease; without leader election the one
// replica is a leader.
func TestReadiness(t *testing.T) {
	tests := []struct {
		name        string
		leaderElect bool
		leading     bool
		synced      bool
		seenLease   bool
		want        string // "" for ready, else a substring of why not
	}{
		{name: "standby that has not reached the API server", leaderElect: true, want: "waiting to read the Lease kube-system/lockstep-operator"},
		{name: "standby that has read the Lease", leaderElect: true, seenLease: true},
		{name: "leader whose informers have not listed", leaderElect: true, seenLease: true, leading: true, want: "waiting for the informers"},
		{name: "leader with synced informers", leaderElect: true, seenLease: true, leading: true, synced: true},
		{name: "no election, before the term", want: "starting"},
		{name: "no election, informers listing", leading: true, want: "waiting for the informers"},
		{name: "no election, synced", leading: true, synced: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := Config{REST: &client.Config{}, LeaderElect: tt.leaderElect}.withDefaults()
			if err != nil {
				t.Fatal(err)
			}
			o := newOpsState(&cfg)
			o.leading.Store(tt.leading)
			o.synced.Store(tt.synced)
			o.seenLease.Store(tt.seenLease)
			err = o.ready(t.Context())
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("ready() = %v, want ready", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("ready() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

// TestOpsEndpoint serves the operator's ops endpoint and reads what a
// term's events make of it: the leader gauge, blocks, handshake steps,
// passes, /readyz through a term, and /healthz naming a stalled loop.
func TestOpsEndpoint(t *testing.T) {
	cfg, err := Config{REST: &client.Config{}, LeaderElect: true}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	o := newOpsState(&cfg)
	srv, err := o.listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve() }()
	defer srv.Shutdown(t.Context())
	addr := srv.Addr()

	if code, body := httpGet(t, addr, "/readyz"); code != 503 || !strings.Contains(body, "waiting to read the Lease") {
		t.Errorf("/readyz before the Lease was read = %d %q", code, body)
	}
	o.leaseAnswered()
	if code, body := httpGet(t, addr, "/readyz"); code != 200 {
		t.Errorf("/readyz of a standby = %d %q, want 200", code, body)
	}
	_, body := httpGet(t, addr, "/metrics")
	if v, ok := sample(body, "lockstep_operator_leader"); !ok || v != 0 {
		t.Errorf("standby: lockstep_operator_leader = %v (%v), want 0", v, ok)
	}

	o.term(true)
	if code, body := httpGet(t, addr, "/readyz"); code != 503 || !strings.Contains(body, "informers") {
		t.Errorf("/readyz of a leader before its informers listed = %d %q", code, body)
	}
	o.termSynced()
	if code, body := httpGet(t, addr, "/readyz"); code != 200 {
		t.Errorf("/readyz of a synced leader = %d %q", code, body)
	}
	old := &v1alpha1.NodeIPAM{Spec: v1alpha1.NodeIPAMSpec{Blocks: []v1alpha1.Block{
		{CIDR: "10.0.0.0/28", Pool: "v4"}, {CIDR: "10.0.0.16/28", Pool: "v4"},
	}}}
	o.blocksAssigned("v4", 2)
	o.specWritten(old, []change{{cidr: "10.0.0.16/28", action: actionMark}})
	o.specWritten(old, []change{{cidr: "10.0.0.16/28", action: actionRelease}})
	o.specWritten(old, []change{{cidr: "10.0.0.0/28", action: actionDrain}})
	o.specWritten(old, []change{{cidr: "10.0.0.0/28", action: actionRelease, drain: true}})
	o.observePass(20*time.Millisecond, time.Millisecond, nil)
	o.observePass(time.Second, time.Millisecond, errors.New("conflict"))

	_, body = httpGet(t, addr, "/metrics")
	for series, want := range map[string]float64{
		"lockstep_operator_leader":                                1,
		`lockstep_operator_blocks_assigned_total{pool="v4"}`:      2,
		`lockstep_operator_blocks_released_total{pool="v4"}`:      2,
		`lockstep_operator_blocks_drained_total{pool="v4"}`:       1,
		`lockstep_operator_handshake_steps_total{step="mark"}`:    1,
		`lockstep_operator_handshake_steps_total{step="drain"}`:   1,
		`lockstep_operator_handshake_steps_total{step="release"}`: 2,
		`lockstep_operator_handshake_steps_total{step="forget"}`:  0,
		`lockstep_operator_passes_total{result="ok"}`:             1,
		`lockstep_operator_passes_total{result="error"}`:          1,
		"lockstep_operator_pass_duration_seconds_count":           2,
		"lockstep_operator_plan_duration_seconds_count":           2,
	} {
		if v, ok := sample(body, series); !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", series, v, ok, want)
		}
	}
	if !strings.Contains(body, "process_resident_memory_bytes") {
		t.Error("/metrics lacks the process metrics")
	}

	o.term(false)
	if _, body := httpGet(t, addr, "/metrics"); !strings.Contains(body, "lockstep_operator_leader 0\n") {
		t.Error("after the term lockstep_operator_leader is not 0")
	}
	if code, _ := httpGet(t, addr, "/readyz"); code != 200 {
		t.Errorf("/readyz of a replica back to standby = %d, want 200", code)
	}

	if code, body := httpGet(t, addr, "/healthz"); code != 200 {
		t.Errorf("/healthz = %d %q", code, body)
	}
	o.watchdog.Register("controller", 20*time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	if code, body := httpGet(t, addr, "/healthz"); code != 503 || !strings.Contains(body, "loop controller") {
		t.Errorf("/healthz with a silent controller = %d %q, want 503 naming it", code, body)
	}
}
