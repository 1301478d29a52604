//go:build linux

package kubetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is one child (etcd or kube-apiserver) whose output goes to a log
// file in the Env's directory.
type process struct {
	name     string
	logPath  string
	logStart int64 // the log's size when this process started: earlier lines are a predecessor's
	cmd      *exec.Cmd
	done     chan struct{} // closed once the process has exited and been reaped
	err      error         // what Wait returned; read only after done
}

// startProcess starts path with args, its stdout and stderr appended to
// logPath. The child gets SIGKILL when the test binary dies, whatever kills
// it (see spawn).
func startProcess(name, path string, args, env []string, logPath string) (*process, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open %s log: %w", name, err)
	}
	defer logf.Close() // the child holds its own copy
	fi, err := logf.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat %s log: %w", name, err)
	}
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := spawn(cmd); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, logPath: logPath, logStart: fi.Size(), cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// spawner runs every fork on one goroutine locked to its OS thread for the
// life of the test binary. Pdeathsig fires when the thread that forked the
// child exits, not the process, and the Go runtime retires threads (a
// goroutine that exits while locked takes its thread along, as namespace
// tests may do); forking from a thread that never exits makes the signal
// mean "the test binary died".
var spawner struct {
	once sync.Once
	fork chan func()
}

// spawn starts cmd from the spawner thread.
func spawn(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.fork = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: the thread must live on
			for f := range spawner.fork {
				f()
			}
		}()
	})
	errc := make(chan error, 1)
	spawner.fork <- func() { errc <- cmd.Start() }
	return <-errc
}

// exited reports whether the process has exited.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, waits up to grace for the process to exit, then
// kills it; a zero grace kills it at once. It returns nil once the process
// is gone, however it went.
func (p *process) stop(grace time.Duration) error {
	if p.exited() {
		return nil
	}
	if grace > 0 {
		if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("stop %s: %w", p.name, err)
		}
		select {
		case <-p.done:
			return nil
		case <-time.After(grace):
		}
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s: %w", p.name, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("kill %s (pid %d): still not reaped after SIGKILL", p.name, p.cmd.Process.Pid)
	}
}

// exitError describes a process that exited while it was expected to come
// up, with the end of its log, which says why.
func (p *process) exitError() error {
	return fmt.Errorf("%s exited during start (%v); last lines of %s:\n%s",
		p.name, p.err, p.logPath, logTail(p.logPath, 15))
}

// portInUse reports whether the process's log says its port was taken
// between freePort and the bind: the one start failure worth a retry.
func (p *process) portInUse() bool {
	b, err := os.ReadFile(p.logPath)
	return err == nil && int64(len(b)) >= p.logStart &&
		bytes.Contains(b[p.logStart:], []byte("address already in use"))
}

// waitReady polls ready every 100ms until it returns nil, the process exits
// or ctx ends; the error says which, with the last error from ready.
func (p *process) waitReady(ctx context.Context, ready func(context.Context) error) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		if last = ready(ctx); last == nil {
			return nil
		}
		select {
		case <-p.done:
			return p.exitError()
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w (last check: %v); last lines of %s:\n%s",
				p.name, ctx.Err(), last, p.logPath, logTail(p.logPath, 15))
		case <-tick.C:
		}
	}
}

// logTail returns the last n lines of the file at path, for error messages.
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(read log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago. The
// caller binds it soon and retries on "address already in use".
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// loopbackURL is scheme://127.0.0.1:port.
func loopbackURL(scheme string, port int) string {
	return scheme + "://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
}
