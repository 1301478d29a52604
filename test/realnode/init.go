//go:build linux

package realnode

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// InitSpec is what a host's init does: the mounts that make its file system
// its own, then its services in order. It is written as JSON by the harness
// and read by RunInit.
type InitSpec struct {
	// Hostname is set in the host's UTS namespace.
	Hostname string `json:"hostname"`
	// Mounts are made in order, in the host's mount namespace.
	Mounts []Mount `json:"mounts,omitempty"`
	// Steps run in order: a service is started and, when it names a
	// readiness path, waited for; a task must exit 0 before the next step.
	Steps []Step `json:"steps"`
	// Relay, when set, forwards every connection accepted on file
	// descriptor 3 (a listener the harness opened on the machine's
	// loopback) to this address in the host's network namespace.
	Relay string `json:"relay,omitempty"`
	// StatusFile is rewritten whenever a step changes state.
	StatusFile string `json:"statusFile"`
}

// Mount is one mount(2) call.
type Mount struct {
	Source string `json:"source,omitempty"`
	Target string `json:"target"`
	Type   string `json:"type,omitempty"`
	// Bind makes a recursive bind mount of Source on Target.
	Bind bool   `json:"bind,omitempty"`
	Data string `json:"data,omitempty"`
	// Mkdir creates Target first.
	Mkdir bool `json:"mkdir,omitempty"`
	// Unmount detaches Target instead of mounting (lazy).
	Unmount bool `json:"unmount,omitempty"`
}

// Step is a service or a one-shot task of a host.
type Step struct {
	Name string   `json:"name"`
	Path string   `json:"path"`
	Args []string `json:"args,omitempty"`
	Env  []string `json:"env,omitempty"`
	// Log is the file that gets the step's stdout and stderr.
	Log string `json:"log"`
	// Task makes the step a one-shot command that must succeed.
	Task bool `json:"task,omitempty"`
	// Ready is a path (a socket or a file) whose appearance means the
	// service is up; the next step waits for it.
	Ready string `json:"ready,omitempty"`
}

// StepStatus is what the status file says of one step.
type StepStatus struct {
	Name     string    `json:"name"`
	PID      int       `json:"pid,omitempty"`
	State    string    `json:"state"` // starting, running, ready, done, failed, restarting, stopped
	Restarts int       `json:"restarts"`
	Since    time.Time `json:"since"`
	Error    string    `json:"error,omitempty"`
}

// InitStatus is the content of the status file.
type InitStatus struct {
	PID   int          `json:"pid"` // as the init sees itself: 1
	Ready bool         `json:"ready"`
	Error string       `json:"error,omitempty"`
	Steps []StepStatus `json:"steps"`
}

// readyTimeout is the longest a service may take to be ready.
const readyTimeout = 3 * time.Minute

// RunInit is the init of one host: it must run as PID 1 of the host's PID
// namespace, inside its mount, UTS and network namespaces (the harness starts
// it with unshare and nsenter). It returns when the host is told to stop
// (SIGTERM or SIGINT) and every service has been stopped; returning ends
// the PID namespace and with it every process the host still had.
func RunInit(specPath string) error {
	b, err := os.ReadFile(specPath)
	if err != nil {
		return fmt.Errorf("read init spec: %w", err)
	}
	var spec InitSpec
	if err := json.Unmarshal(b, &spec); err != nil {
		return fmt.Errorf("parse init spec %s: %w", specPath, err)
	}
	in := &initProc{spec: spec, status: InitStatus{PID: os.Getpid()}}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	go reapOrphans(in)

	if spec.Hostname != "" {
		if err := unix.Sethostname([]byte(spec.Hostname)); err != nil {
			return in.fail(fmt.Errorf("set host name: %w", err))
		}
	}
	for _, m := range spec.Mounts {
		if err := doMount(m); err != nil {
			return in.fail(err)
		}
	}
	if spec.Relay != "" {
		lis, err := net.FileListener(os.NewFile(3, "relay"))
		if err != nil {
			return in.fail(fmt.Errorf("relay: use inherited listener: %w", err))
		}
		go relay(ctx, lis, spec.Relay)
	}
	for i := range spec.Steps {
		in.status.Steps = append(in.status.Steps, StepStatus{Name: spec.Steps[i].Name, State: "pending", Since: time.Now()})
	}
	in.write()
	for i, st := range spec.Steps {
		if err := in.start(ctx, i, st); err != nil {
			if ctx.Err() != nil {
				break
			}
			in.mu.Lock()
			in.status.Error = err.Error()
			in.mu.Unlock()
			in.write()
			log.Printf("init: %v; stopping", err)
			break
		}
	}
	in.mu.Lock()
	in.status.Ready = in.status.Error == ""
	in.mu.Unlock()
	in.write()
	<-ctx.Done()
	in.stopAll()
	return nil
}

// initProc is the running init's state.
type initProc struct {
	spec InitSpec

	mu       sync.Mutex
	writeMu  sync.Mutex // serializes writes of the status file
	status   InitStatus
	services []*service // started services, in start order
	// exited receives the status of every child the reaper collects,
	// keyed by PID; the services' own waits read from it.
	waiters map[int]chan syscall.WaitStatus
}

type service struct {
	index   int
	step    Step
	mu      sync.Mutex
	cmd     *exec.Cmd
	stopped bool
	done    chan struct{} // closed when the supervising goroutine ends
}

func (in *initProc) fail(err error) error {
	in.mu.Lock()
	in.status.Error = err.Error()
	in.mu.Unlock()
	in.write()
	return err
}

func (in *initProc) setStep(i int, f func(*StepStatus)) {
	in.mu.Lock()
	f(&in.status.Steps[i])
	in.status.Steps[i].Since = time.Now()
	in.mu.Unlock()
	in.write()
}

// write replaces the status file atomically.
func (in *initProc) write() {
	if in.spec.StatusFile == "" {
		return
	}
	in.writeMu.Lock()
	defer in.writeMu.Unlock()
	in.mu.Lock()
	b, _ := json.MarshalIndent(in.status, "", "  ")
	in.mu.Unlock()
	tmp := in.spec.StatusFile + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err == nil {
		_ = os.Rename(tmp, in.spec.StatusFile)
	}
}

// start runs step i: a task to completion, or a service until it is ready.
func (in *initProc) start(ctx context.Context, i int, st Step) error {
	if st.Task {
		in.setStep(i, func(s *StepStatus) { s.State = "starting" })
		cmd, err := in.spawn(st)
		if err != nil {
			in.setStep(i, func(s *StepStatus) { s.State, s.Error = "failed", err.Error() })
			return fmt.Errorf("%s: %w", st.Name, err)
		}
		ws := in.wait(cmd.Process.Pid)
		if !ws.Exited() || ws.ExitStatus() != 0 {
			err := fmt.Errorf("%s exited with %v (log %s)", st.Name, ws, st.Log)
			in.setStep(i, func(s *StepStatus) { s.State, s.Error = "failed", err.Error() })
			return err
		}
		in.setStep(i, func(s *StepStatus) { s.State, s.Error = "done", "" })
		return nil
	}
	svc := &service{index: i, step: st, done: make(chan struct{})}
	in.mu.Lock()
	in.services = append(in.services, svc)
	in.mu.Unlock()
	started := make(chan error, 1)
	go in.supervise(svc, started)
	if err := <-started; err != nil {
		return fmt.Errorf("%s: %w", st.Name, err)
	}
	if st.Ready == "" {
		return nil
	}
	deadline := time.Now().Add(readyTimeout)
	for {
		if isReady(st.Ready) {
			in.setStep(i, func(s *StepStatus) { s.State = "ready" })
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %s did not appear within %s (log %s)", st.Name, st.Ready, readyTimeout, st.Log)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// isReady checks a Step's Ready: "tcp://HOST:PORT" is ready when it
// accepts a connection, an http(s) URL when it answers 200 (the
// certificate is not checked: this only asks whether the server is up), a
// path when it exists.
func isReady(ready string) bool {
	switch {
	case strings.HasPrefix(ready, "tcp://"):
		c, err := net.DialTimeout("tcp", strings.TrimPrefix(ready, "tcp://"), time.Second)
		if err != nil {
			return false
		}
		c.Close()
		return true
	case strings.HasPrefix(ready, "http://"), strings.HasPrefix(ready, "https://"):
		cl := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // readiness only
		}}
		resp, err := cl.Get(ready)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	_, err := os.Stat(ready)
	return err == nil
}

// restartBackoff bounds how fast a failing service is restarted.
const (
	restartMin = 500 * time.Millisecond
	restartMax = 10 * time.Second
)

// supervise starts svc and restarts it whenever it exits, until stopAll.
// The first start's error is sent on started.
func (in *initProc) supervise(svc *service, started chan<- error) {
	defer close(svc.done)
	backoff := restartMin
	first := true
	for {
		svc.mu.Lock()
		if svc.stopped {
			svc.mu.Unlock()
			return
		}
		cmd, err := in.spawn(svc.step)
		if err == nil {
			svc.cmd = cmd
		}
		svc.mu.Unlock()
		if first {
			started <- err
			first = false
		}
		if err != nil {
			in.setStep(svc.index, func(s *StepStatus) { s.State, s.Error = "failed", err.Error() })
			return
		}
		in.setStep(svc.index, func(s *StepStatus) {
			s.PID = cmd.Process.Pid
			if s.State != "ready" {
				s.State = "running"
			}
		})
		t0 := time.Now()
		ws := in.wait(cmd.Process.Pid)
		svc.mu.Lock()
		stopped := svc.stopped
		svc.mu.Unlock()
		if stopped {
			in.setStep(svc.index, func(s *StepStatus) { s.State, s.PID = "stopped", 0 })
			return
		}
		if time.Since(t0) > time.Minute {
			backoff = restartMin
		}
		log.Printf("init: %s exited (%v) after %s; restarting in %s", svc.step.Name, ws, time.Since(t0).Round(time.Millisecond), backoff)
		in.setStep(svc.index, func(s *StepStatus) {
			s.State, s.PID, s.Error = "restarting", 0, fmt.Sprintf("exited: %v", ws)
			s.Restarts++
		})
		time.Sleep(backoff)
		backoff = min(2*backoff, restartMax)
	}
}

// spawn starts a step's process with its log file as stdout and stderr, in
// a process group of its own (so stopping it stops what it forked).
func (in *initProc) spawn(st Step) (*exec.Cmd, error) {
	if err := os.MkdirAll(filepath.Dir(st.Log), 0o755); err != nil {
		return nil, fmt.Errorf("create log dir: %w", err)
	}
	logf, err := os.OpenFile(st.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open log: %w", err)
	}
	defer logf.Close()
	fmt.Fprintf(logf, "=== %s: %s %q\n", time.Now().Format(time.RFC3339Nano), st.Path, st.Args)
	cmd := exec.Command(st.Path, st.Args...)
	cmd.Env = append(os.Environ(), st.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	// The reaper collects every child: register before the child can
	// exit, under the lock the reaper takes.
	in.mu.Lock()
	defer in.mu.Unlock()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	if in.waiters == nil {
		in.waiters = map[int]chan syscall.WaitStatus{}
	}
	in.waiters[cmd.Process.Pid] = make(chan syscall.WaitStatus, 1)
	return cmd, nil
}

// wait returns the exit status of a child started by spawn.
func (in *initProc) wait(pid int) syscall.WaitStatus {
	in.mu.Lock()
	ch := in.waiters[pid]
	in.mu.Unlock()
	ws := <-ch
	in.mu.Lock()
	delete(in.waiters, pid)
	in.mu.Unlock()
	return ws
}

// reapOrphans is PID 1's duty: collect every child that exits, the
// services and every orphan the host's processes leave (reparented to PID
// 1), and hand the services' statuses to their waiters.
func reapOrphans(in *initProc) {
	sigc := make(chan os.Signal, 16)
	signal.Notify(sigc, syscall.SIGCHLD)
	for {
		for {
			var ws syscall.WaitStatus
			in.mu.Lock()
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid > 0 {
				if ch, ok := in.waiters[pid]; ok {
					ch <- ws
				}
			}
			in.mu.Unlock()
			if pid <= 0 || err != nil {
				break
			}
		}
		select {
		case <-sigc:
		case <-time.After(time.Second):
		}
	}
}

// stopGrace is how long a service gets between SIGTERM and SIGKILL.
const stopGrace = 15 * time.Second

// stopAll stops the services in reverse start order.
func (in *initProc) stopAll() {
	in.mu.Lock()
	svcs := append([]*service(nil), in.services...)
	in.mu.Unlock()
	for i := len(svcs) - 1; i >= 0; i-- {
		svc := svcs[i]
		svc.mu.Lock()
		svc.stopped = true
		cmd := svc.cmd
		svc.mu.Unlock()
		if cmd != nil && cmd.Process != nil {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		}
		select {
		case <-svc.done:
		case <-time.After(stopGrace):
			if cmd != nil && cmd.Process != nil {
				_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			}
			<-svc.done
		}
	}
}

// doMount performs one Mount.
func doMount(m Mount) error {
	if m.Unmount {
		if err := unix.Unmount(m.Target, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount %s: %w", m.Target, err)
		}
		return nil
	}
	if m.Mkdir {
		if err := os.MkdirAll(m.Target, 0o755); err != nil {
			return fmt.Errorf("create mount point %s: %w", m.Target, err)
		}
	}
	var flags uintptr
	typ := m.Type
	if m.Bind {
		flags = unix.MS_BIND | unix.MS_REC
		typ = ""
	}
	src := m.Source
	if src == "" {
		src = typ
	}
	if err := unix.Mount(src, m.Target, typ, flags, m.Data); err != nil {
		return fmt.Errorf("mount %s (%s) on %s: %w", src, typ, m.Target, err)
	}
	return nil
}

// relay forwards connections accepted on lis to addr.
func relay(ctx context.Context, lis net.Listener, addr string) {
	go func() {
		<-ctx.Done()
		lis.Close()
	}()
	for {
		c, err := lis.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		go func() {
			defer c.Close()
			up, err := net.DialTimeout("tcp", addr, 5*time.Second)
			if err != nil {
				return
			}
			defer up.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(up, c); closeWrite(up); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, up); closeWrite(c); done <- struct{}{} }()
			<-done
			<-done
		}()
	}
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}
