//go:build linux

package datapath

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/server"
	"lockstep.dev/lockstep/agent/verdicts"
	"lockstep.dev/lockstep/bpfmaps"
	"lockstep.dev/lockstep/test/testenv"
)

// subscriberSocket, set in the environment, makes the test binary a
// monitor subscriber of the agent socket it names (see TestMain): it
// prints every verdict as a JSON line until it is killed.
const subscriberSocket = "LOCKSTEP_TEST_MONITOR_SOCKET"

func TestMain(m *testing.M) {
	if sock := os.Getenv(subscriberSocket); sock != "" {
		c := api.NewClient(sock, 5*time.Second)
		enc := json.NewEncoder(os.Stdout)
		fmt.Println(`{"subscribed":true}`)
		err := c.Monitor(context.Background(), api.MonitorRequest{}, func(v api.Verdict) error { return enc.Encode(v) })
		fmt.Fprintln(os.Stderr, "monitor:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// noBackend serves no operation but the monitor.
type noBackend struct{ server.Backend }

// ruleNamer names rules from d and nothing else.
type ruleNamer struct{ d *Datapath }

func (ruleNamer) Endpoint(uint32) string                     { return "" }
func (ruleNamer) Peer(uint32) string                         { return "" }
func (n ruleNamer) Rule(id uint32) (policy.RuleOrigin, bool) { return n.d.RuleOrigin(id) }

// subscriber is a monitor process and the verdict lines it prints.
type subscriber struct {
	cmd   *exec.Cmd
	lines chan api.Verdict
}

func startSubscriber(t *testing.T, sock string) *subscriber {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), subscriberSocket+"="+sock)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	s := &subscriber{cmd: cmd, lines: make(chan api.Verdict, 16)}
	go func() {
		r := bufio.NewReader(out)
		for {
			line, err := r.ReadBytes('\n')
			if err != nil {
				close(s.lines)
				return
			}
			var v api.Verdict
			if json.Unmarshal(line, &v) == nil && v.Verdict != "" {
				s.lines <- v
			}
		}
	}()
	return s
}

func (s *subscriber) next(t *testing.T) api.Verdict {
	t.Helper()
	select {
	case v, ok := <-s.lines:
		if !ok {
			t.Fatal("subscriber exited")
		}
		return v
	case <-time.After(5 * time.Second):
		t.Fatal("no verdict within 5s")
	}
	return api.Verdict{}
}

// waitUntil polls cond for up to 5 seconds.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 5s", what)
		}
	}
}

// Two monitor processes subscribed to the agent's socket both get the
// same drop, named; emission stays on while either listens and is off
// once the last one is SIGKILLed, which only closes its socket.
func TestPrivilegedMonitorSubscribersAndKill(t *testing.T) {
	testenv.Privileged(t)
	d := newTestDatapath(t)
	d.fakeAttach(podIf, loIfindex)
	mustApply(t, d, scenario(true, true))

	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	hub := verdicts.NewHub(func() (verdicts.Reader, error) { return d.Events() }, log)
	srv := server.NewAPIServer(noBackend{}, log, nil)
	srv.SetMonitor(hub.Stream(ruleNamer{d}))
	sock := filepath.Join(t.TempDir(), "agent.sock")
	lis, err := server.ListenSocket(sock)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(lis)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	monitorFlag := func() uint32 {
		es, err := bpfmaps.Dump(d.pinRoot, bpfmaps.MonitorMap)
		if err != nil {
			t.Fatal(err)
		}
		return es[0].Value.(uint32)
	}
	if f := monitorFlag(); f != 0 {
		t.Fatalf("monitor flag %d before any subscriber, want 0", f)
	}

	a, b := startSubscriber(t, sock), startSubscriber(t, sock)
	waitUntil(t, "two subscribers", func() bool { return hub.Subscribers() == 2 })
	if f := monitorFlag(); f != 1 {
		t.Fatalf("monitor flag %d with two subscribers, want 1", f)
	}
	run(t, d.fromPod, packet{src: podV4, dst: "10.0.0.3", proto: policyapi.ProtoTCP, sport: 4321, dport: 81})
	for name, s := range map[string]*subscriber{"first": a, "second": b} {
		v := s.next(t)
		if v.Verdict != "drop" || v.Rule != "default deny" || v.Dport != 81 || v.Daddr != "10.0.0.3" || v.Dir != "egress" {
			t.Errorf("%s subscriber: %+v, want the egress drop to 10.0.0.3:81 by default deny", name, v)
		}
	}

	if err := a.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "one subscriber after the first is killed", func() bool { return hub.Subscribers() == 1 })
	if f := monitorFlag(); f != 1 {
		t.Errorf("monitor flag %d with one subscriber left, want 1", f)
	}
	run(t, d.fromPod, packet{src: podV4, dst: "10.0.0.3", proto: policyapi.ProtoTCP, sport: 4322, dport: 82})
	if v := b.next(t); v.Dport != 82 {
		t.Errorf("remaining subscriber: %+v, want the drop to port 82", v)
	}

	if err := b.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "no subscriber after the second is killed", func() bool { return hub.Subscribers() == 0 })
	if f := monitorFlag(); f != 0 {
		t.Errorf("monitor flag %d after the last subscriber was killed, want 0", f)
	}
}
