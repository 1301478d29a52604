//go:build linux

package kubetest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options configures an Env. The zero value is what tests want.
type Options struct {
	// BinDir holds kube-apiserver and kubectl. Empty means the directory
	// tools/kube-testenv/build.sh prints, building them there if missing.
	BinDir string
	// APIServerArgs are appended to kube-apiserver's flags, so a flag given
	// here wins over the Env's own (e.g. "--feature-gates=...").
	APIServerArgs []string
	// Logf receives progress: the build when one is needed, start-up
	// timings. Nil discards it.
	Logf func(format string, args ...any)
}

// Env is one running etcd and kube-apiserver. Its exported fields are set
// once Start or StartEnv returns and do not change, not even across
// RestartAPIServer.
type Env struct {
	// Host is the apiserver's URL, https://127.0.0.1:<port>.
	Host string
	// Token is a bearer token for a user in system:masters.
	Token string
	// CAFile is the PEM file of the CA that signed the apiserver's serving
	// certificate.
	CAFile string
	// Kubeconfig is a kubeconfig file for Host, the CA (inline) and Token,
	// usable by kubectl and client-go alike.
	Kubeconfig string
	// KubectlPath is the kubectl built with the apiserver, of the same
	// release.
	KubectlPath string
	// EtcdURL is etcd's client URL, http://127.0.0.1:<port>.
	EtcdURL string
	// Dir holds everything the Env writes: etcd's data, certificates, keys,
	// the kubeconfig and both processes' logs (etcd.log,
	// kube-apiserver.log). Stop removes it.
	Dir string

	opts      Options
	bin       binaries
	port      int
	restarts  int
	caPEM     []byte
	http      *http.Transport
	transport http.RoundTripper

	mu        sync.Mutex // serializes Stop and the apiserver restarts
	etcd      *process
	apiserver *process
	stopped   bool
}

// dirPrefix starts the name of every Env's directory under os.TempDir, so
// the next Start can find the ones a killed test binary left behind.
const dirPrefix = "lockstep-kubetest-"

// StartEnv starts etcd and kube-apiserver and returns once the apiserver's
// /readyz passes. The caller must Stop the Env. When StartEnv fails it has
// already stopped whatever it started.
func StartEnv(ctx context.Context, opts Options) (*Env, error) {
	e := newEnv(opts)
	if err := e.start(ctx); err != nil {
		if serr := e.Stop(); serr != nil {
			err = errors.Join(err, serr)
		}
		return nil, err
	}
	return e, nil
}

// newEnv returns an Env that has started nothing yet; Stop is safe on it.
func newEnv(opts Options) *Env {
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	return &Env{opts: opts}
}

// logf reports progress through Options.Logf.
func (e *Env) logf(format string, args ...any) { e.opts.Logf(format, args...) }

// start finds or builds the binaries, then brings up etcd, then the
// apiserver, then writes the kubeconfig.
func (e *Env) start(ctx context.Context) error {
	removeStaleDirs()
	bin, err := findBinaries(ctx, e.opts.BinDir, e.logf)
	if err != nil {
		return err
	}
	e.bin, e.KubectlPath = bin, bin.kubectl

	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return errors.New("env already stopped")
	}
	if e.Dir, err = os.MkdirTemp("", dirPrefix); err != nil {
		return fmt.Errorf("create env dir: %w", err)
	}
	pid := strconv.Itoa(os.Getpid()) + "\n"
	if err := os.WriteFile(filepath.Join(e.Dir, "owner.pid"), []byte(pid), 0o644); err != nil {
		return fmt.Errorf("write owner pid: %w", err)
	}
	if err := e.writeSecrets(); err != nil {
		return err
	}

	t0 := time.Now()
	if e.EtcdURL, err = e.startEtcd(ctx); err != nil {
		return err
	}
	t1 := time.Now()
	if err := e.startAPIServer(ctx); err != nil {
		return err
	}
	t2 := time.Now()
	if err := e.writeKubeconfig(); err != nil {
		return err
	}
	e.logf("kubetest: etcd ready in %s, kube-apiserver ready in %s at %s (logs in %s)",
		t1.Sub(t0).Round(time.Millisecond), t2.Sub(t1).Round(time.Millisecond), e.Host, e.Dir)
	return nil
}

// StopAPIServer stops kube-apiserver gracefully (SIGTERM, as a rolling
// update does), leaving etcd and all stored objects in place. Requests fail
// until StartAPIServer.
func (e *Env) StopAPIServer() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.apiserver == nil {
		return nil
	}
	return e.apiserver.stop(15 * time.Second)
}

// StartAPIServer starts kube-apiserver again after StopAPIServer, on the
// same port with the same certificate, token and etcd, and waits for
// /readyz. Host, CAFile and Kubeconfig stay valid.
func (e *Env) StartAPIServer(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return errors.New("start kube-apiserver: env is stopped")
	}
	if e.apiserver != nil && !e.apiserver.exited() {
		return errors.New("start kube-apiserver: it is running; stop it first")
	}
	e.restarts++
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	if err := e.startAPIServer(ctx); err != nil {
		return fmt.Errorf("restart kube-apiserver: %w", err)
	}
	e.logf("kubetest: kube-apiserver back in %s", time.Since(t0).Round(time.Millisecond))
	return nil
}

// RestartAPIServer is StopAPIServer then StartAPIServer: every watch and
// connection is dropped, every stored object survives.
func (e *Env) RestartAPIServer(ctx context.Context) error {
	if err := e.StopAPIServer(); err != nil {
		return err
	}
	return e.StartAPIServer(ctx)
}

// Stop kills the apiserver and etcd and removes Dir. Nothing of the Env is
// kept, so nothing is shut down gracefully: SIGKILL, not SIGTERM. Stop is
// safe to call more than once and on an Env that failed to start.
func (e *Env) Stop() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.stopped {
		return nil
	}
	e.stopped = true
	var errs []error
	if e.apiserver != nil {
		errs = append(errs, e.apiserver.stop(0))
	}
	if e.etcd != nil {
		errs = append(errs, e.etcd.stop(0))
	}
	if e.http != nil {
		e.http.CloseIdleConnections()
	}
	if e.Dir != "" {
		if err := os.RemoveAll(e.Dir); err != nil {
			errs = append(errs, fmt.Errorf("remove env dir: %w", err))
		}
	}
	return errors.Join(errs...)
}

// logTails reports the end of both logs, for a test that failed.
func (e *Env) logTails(logf func(string, ...any)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, p := range []*process{e.etcd, e.apiserver} {
		if p != nil {
			logf("kubetest: last lines of %s:\n%s", filepath.Base(p.logPath), logTail(p.logPath, 30))
		}
	}
}

// removeStaleDirs removes the directories of Envs whose test binary died
// without running Stop (a test timeout ends the binary without cleanups).
// A directory whose owner still runs, or whose owner cannot be told, stays.
func removeStaleDirs() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "owner.pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(d)
		}
	}
}
