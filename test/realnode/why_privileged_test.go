//go:build linux

package realnode_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"lockstep.dev/lockstep/test/realnode"
)

// TestPrivilegedRealNodeWhyDropped is issue 19 as a new user meets it: a
// connection that worked is broken by a NetworkPolicy nobody on the
// project wrote, and lockstep's own output says why, read the way a user
// reads it, through kubectl: `lockstep explain` in the agent pod of the
// server's node names the isolating policy and "default deny", `lockstep
// monitor` there shows the drops with the server's name, the client's
// namespace and labels and "default deny", and the agent's /metrics counts
// the drops against the policy. A second policy that lets the client in
// is then named, rule and all, by explain, by monitor's allow verdicts
// and by the allow count.
func TestPrivilegedRealNodeWhyDropped(t *testing.T) {
	c := cluster(t)
	const ns = "why-dropped"
	namespace(t, c, ns, nil)
	apply(t, c, strings.Join([]string{
		agnhostPod(ns, "client", node1, map[string]string{"app": "client"}),
		agnhostPod(ns, "server", node2, map[string]string{"app": "server"}),
	}, "\n---\n"))
	pods := waitReady(t, c, ns, "client", "server")
	server := net.JoinHostPort(pods["server"].ip("4"), "8080")
	if !connect(t, c, ns, "client", server, "tcp") {
		t.Fatalf("the client cannot reach the server at %s before any policy", server)
	}
	agent := agentPod(t, c, pods["server"].Spec.NodeName)

	// A policy as a user might write it: the server takes connections on
	// 8080 from app=other only.
	apply(t, c, ingressPolicy(ns, "only-other", "server", "other"))
	err := realnode.Poll(t.Context(), time.Minute, time.Second, "only-other to drop the client", func() (bool, string, error) {
		return !connect(t, c, ns, "client", server, "tcp"), "the client still reaches the server", nil
	})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("explain says deny, by default deny of only-other", func(t *testing.T) {
		r := explainInAgent(t, c, agent, ns+"/client", ns+"/server", "8080")
		if r.Verdict != "deny" || !strings.Contains(r.Reason, "default deny") {
			t.Errorf("explain: verdict %q, reason %q; want deny by default deny", r.Verdict, r.Reason)
		}
		in := r.Ingress
		if in.Endpoint != ns+"/server" || !in.Isolated || !slices.Contains(in.Policies, ns+"/only-other") {
			t.Errorf("explain's ingress side %+v: want %s/server isolated by %s/only-other", in, ns, ns)
		}
		if in.Verdict != "deny" || len(in.AllowedBy) != 0 || !strings.Contains(in.Reason, "default deny") || !strings.Contains(in.Reason, ns+"/only-other") {
			t.Errorf("explain's ingress side %+v: want deny, no rule, a reason naming default deny and %s/only-other", in, ns)
		}
		if r.Egress.Verdict != "allow" || r.Egress.Isolated {
			t.Errorf("explain's egress side %+v: want the client not isolated, allowed", r.Egress)
		}
	})

	t.Run("monitor shows the drops by default deny", func(t *testing.T) {
		stop := keepConnecting(t, c, ns, "client", server)
		want := func(v verdictLine) bool {
			return v.Verdict == "drop" && v.Direction == "ingress" && v.Endpoint == ns+"/server" &&
				v.Peer == ns+`/{"app":"client"}` && v.Rule == "default deny" && v.Dport == 8080
		}
		seen := monitorInAgent(t, c, agent, 30*time.Second, want, "--verdict", "drop", "--namespace", ns)
		stop()
		if !slices.ContainsFunc(seen, want) {
			t.Errorf("no drop at %s/server from %s/{\"app\":\"client\"} by default deny on 8080 among the monitor's %d verdicts: %+v", ns, ns, len(seen), seen)
		}
		for _, v := range seen {
			if v.Verdict != "drop" {
				t.Errorf("monitor --verdict drop printed %+v", v)
			}
		}
	})

	t.Run("metrics count the drops against only-other", func(t *testing.T) {
		series := policyVerdicts(t, c, agent)
		if n := series[policySeries{ns, "only-other", "ingress", "deny"}]; n <= 0 {
			t.Errorf("lockstep_policy_verdicts_total of %s/only-other ingress deny is %v, want the client's drops; the series: %v", ns, n, series)
		}
	})

	// The user's fix: a second policy lets the client in.
	apply(t, c, ingressPolicy(ns, "allow-client", "server", "client"))
	err = realnode.Poll(t.Context(), time.Minute, time.Second, "allow-client to let the client in", func() (bool, string, error) {
		return connect(t, c, ns, "client", server, "tcp"), "the client still cannot reach the server", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	rule := ns + "/allow-client ingress[0]"

	t.Run("explain says allow, by allow-client ingress[0]", func(t *testing.T) {
		r := explainInAgent(t, c, agent, ns+"/client", ns+"/server", "8080")
		in := r.Ingress
		if r.Verdict != "allow" || in.Verdict != "allow" || !slices.Contains(in.AllowedBy, rule) {
			t.Errorf("explain: verdict %q, ingress %+v; want allow by %s", r.Verdict, in, rule)
		}
		for _, p := range []string{ns + "/allow-client", ns + "/only-other"} {
			if !slices.Contains(in.Policies, p) {
				t.Errorf("explain's ingress policies %v lack %s", in.Policies, p)
			}
		}
	})

	t.Run("monitor shows the allows by allow-client ingress[0]", func(t *testing.T) {
		stop := keepConnecting(t, c, ns, "client", server)
		want := func(v verdictLine) bool {
			return v.Verdict == "allow" && v.Direction == "ingress" && v.Endpoint == ns+"/server" &&
				v.Peer == ns+`/{"app":"client"}` && v.Rule == rule && v.Policy == ns+"/allow-client" && v.Dport == 8080
		}
		seen := monitorInAgent(t, c, agent, 30*time.Second, want, "--verdict", "allow", "--namespace", ns)
		stop()
		if !slices.ContainsFunc(seen, want) {
			t.Errorf("no allow at %s/server from %s/{\"app\":\"client\"} by %s on 8080 among the monitor's %d verdicts: %+v", ns, ns, rule, len(seen), seen)
		}
	})

	t.Run("metrics count the allows against allow-client", func(t *testing.T) {
		series := policyVerdicts(t, c, agent)
		if n := series[policySeries{ns, "allow-client", "ingress", "allow"}]; n <= 0 {
			t.Errorf("lockstep_policy_verdicts_total of %s/allow-client ingress allow is %v, want the client's connections; the series: %v", ns, n, series)
		}
	})
}

// ingressPolicy renders a NetworkPolicy isolating app=app for ingress
// and allowing TCP 8080 from the pods of its namespace labelled app=from.
func ingressPolicy(ns, name, app, from string) string {
	b, _ := json.Marshal(map[string]any{
		"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"podSelector": map[string]any{"matchLabels": map[string]string{"app": app}},
			"policyTypes": []string{"Ingress"},
			"ingress": []any{map[string]any{
				"from":  []any{map[string]any{"podSelector": map[string]any{"matchLabels": map[string]string{"app": from}}}},
				"ports": []any{map[string]any{"protocol": "TCP", "port": 8080}},
			}},
		},
	})
	return string(b)
}

// explained is what the test reads of `lockstep explain -o json`.
type explained struct {
	Verdict string        `json:"verdict"`
	Reason  string        `json:"reason"`
	Egress  explainedSide `json:"egress"`
	Ingress explainedSide `json:"ingress"`
	// Backends are a Service's, each named by its pod.
	Backends []struct {
		To struct {
			Pod string `json:"pod"`
		} `json:"to"`
	} `json:"backends"`
}

type explainedSide struct {
	Endpoint  string   `json:"endpoint"`
	Isolated  bool     `json:"isolated"`
	Policies  []string `json:"policies"`
	AllowedBy []string `json:"allowedBy"`
	Verdict   string   `json:"verdict"`
	Reason    string   `json:"reason"`
}

// explainInAgent runs `lockstep explain -o json` in an agent pod through
// kubectl exec, as a user would, and decodes its answer.
func explainInAgent(tb testing.TB, c *realnode.Cluster, agent, from, to, port string) explained {
	tb.Helper()
	out, err := c.Kubectl(tb.Context(), "exec", "-n", "kube-system", agent, "-c", "agent", "--",
		"lockstep", "explain", "--from", from, "--to", to, "--port", port, "-o", "json")
	if err != nil {
		tb.Fatalf("lockstep explain in %s: %v\n%s", agent, err, out)
	}
	var r explained
	if err := json.Unmarshal(out, &r); err != nil {
		tb.Fatalf("decode lockstep explain: %v\n%s", err, out)
	}
	tb.Logf("lockstep explain --from %s --to %s --port %s: %s: %s", from, to, port, r.Verdict, r.Reason)
	return r
}

// keepConnecting has a pod connect to addr again and again, the way a
// client retries, until the returned function is called.
func keepConnecting(tb testing.TB, c *realnode.Cluster, ns, from, addr string) (stop func()) {
	ctx, cancel := context.WithCancel(tb.Context())
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			// The answer does not matter here: the verdicts do.
			_, _ = c.Kubectl(ctx, "exec", "-n", ns, from, "--", "/agnhost", "connect", addr, "--timeout=2s", "--protocol=tcp")
			select {
			case <-ctx.Done():
			case <-time.After(300 * time.Millisecond):
			}
		}
	})
	return func() { cancel(); wg.Wait() }
}

// verdictLine is what the test reads of one line of `lockstep monitor -o
// json`.
type verdictLine struct {
	Verdict   string `json:"verdict"`
	Direction string `json:"direction"`
	Endpoint  string `json:"endpoint"`
	Peer      string `json:"peer"`
	Dport     uint16 `json:"dport"`
	Rule      string `json:"rule"`
	Policy    string `json:"policy"`
	Count     int    `json:"count"`
}

// monitorInAgent runs `lockstep monitor ARGS -o json` in an agent pod as a
// user does, `kubectl exec -it` on a terminal, until a verdict satisfies
// done or d passes, and then presses Ctrl-C: the monitor must stop on it,
// so that none is left connected to the agent (which emits events while
// one is). It returns the verdicts printed.
func monitorInAgent(tb testing.TB, c *realnode.Cluster, agent string, d time.Duration, done func(verdictLine) bool, args ...string) []verdictLine {
	tb.Helper()
	term, tty, err := openPTY()
	if err != nil {
		tb.Fatal(err)
	}
	defer term.Close()
	ctx, cancel := context.WithTimeout(tb.Context(), d+30*time.Second)
	defer cancel()
	argv := append([]string{"--kubeconfig", c.Kubeconfig, "exec", "-i", "-t", "-n", "kube-system", agent, "-c", "agent", "--",
		"lockstep", "monitor"}, append(args, "-o", "json")...)
	cmd := exec.CommandContext(ctx, c.KubectlPath, argv...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
	cmd.SysProcAttr = &unix.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		tty.Close()
		tb.Fatalf("start kubectl exec lockstep monitor: %v", err)
	}
	tty.Close()

	var (
		mu    sync.Mutex
		seen  []verdictLine
		other []string
	)
	found := make(chan struct{})
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(term)
		once := sync.Once{}
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			var v verdictLine
			if !strings.HasPrefix(line, "{") || json.Unmarshal([]byte(line), &v) != nil {
				mu.Lock()
				other = append(other, line)
				mu.Unlock()
				continue
			}
			mu.Lock()
			seen = append(seen, v)
			mu.Unlock()
			if done(v) {
				once.Do(func() { close(found) })
			}
		}
	}()
	select {
	case <-found:
	case <-read:
	case <-time.After(d):
	}
	if _, err := term.Write([]byte{3}); err != nil { // Ctrl-C
		tb.Errorf("press Ctrl-C on lockstep monitor: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		if err != nil {
			tb.Errorf("lockstep monitor in %s after Ctrl-C: %v", agent, err)
		}
	case <-time.After(15 * time.Second):
		tb.Errorf("lockstep monitor in %s did not stop within 15s of Ctrl-C", agent)
		_ = cmd.Process.Kill()
		<-exited
	}
	term.Close()
	<-read
	mu.Lock()
	defer mu.Unlock()
	tb.Logf("lockstep monitor %s: %d verdicts %+v; other output: %q", strings.Join(args, " "), len(seen), seen, other)
	return seen
}

// openPTY opens a pseudo-terminal: term is the side the test types into
// and reads from, tty the one kubectl runs on.
func openPTY() (term, tty *os.File, err error) {
	term, err = os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open a pseudo-terminal: %w", err)
	}
	fd := int(term.Fd())
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		term.Close()
		return nil, nil, fmt.Errorf("unlock the pseudo-terminal: %w", err)
	}
	n, err := unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	if err != nil {
		term.Close()
		return nil, nil, fmt.Errorf("get the pseudo-terminal's number: %w", err)
	}
	tty, err = os.OpenFile("/dev/pts/"+strconv.Itoa(int(n)), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		term.Close()
		return nil, nil, fmt.Errorf("open the pseudo-terminal's tty: %w", err)
	}
	return term, tty, nil
}

// datapathPackets reads lockstep_datapath_packets_total{reason=reason}
// from an agent's /metrics, as policyVerdicts does; 0 when the series is
// not there.
func datapathPackets(tb testing.TB, c *realnode.Cluster, agent, reason string) float64 {
	tb.Helper()
	out, err := c.Kubectl(tb.Context(), "get", "--raw", "/api/v1/namespaces/kube-system/pods/"+agent+":9962/proxy/metrics")
	if err != nil {
		tb.Fatalf("read the metrics of %s: %v", agent, err)
	}
	prefix := `lockstep_datapath_packets_total{reason="` + reason + `"} `
	for line := range strings.Lines(string(out)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				tb.Fatalf("parse %q: %v", line, err)
			}
			return n
		}
	}
	return 0
}

// policySeries names one series of lockstep_policy_verdicts_total.
type policySeries struct{ namespace, policy, direction, verdict string }

var seriesLine = regexp.MustCompile(`^lockstep_policy_verdicts_total\{namespace="([^"]*)",policy="([^"]*)",direction="([^"]*)",verdict="([^"]*)"\} (\S+)$`)

// policyVerdicts reads lockstep_policy_verdicts_total from an agent's
// /metrics through the API server's proxy, as `kubectl get --raw` lets a
// user do.
func policyVerdicts(tb testing.TB, c *realnode.Cluster, agent string) map[policySeries]float64 {
	tb.Helper()
	out, err := c.Kubectl(tb.Context(), "get", "--raw", "/api/v1/namespaces/kube-system/pods/"+agent+":9962/proxy/metrics")
	if err != nil {
		tb.Fatalf("read the metrics of %s: %v", agent, err)
	}
	series := map[policySeries]float64{}
	for line := range strings.Lines(string(out)) {
		m := seriesLine.FindStringSubmatch(strings.TrimSpace(line))
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[5], 64)
		if err != nil {
			tb.Fatalf("parse %q: %v", line, err)
		}
		series[policySeries{m[1], m[2], m[3], m[4]}] = v
		tb.Logf("%s", strings.TrimSpace(line))
	}
	return series
}
