//go:build linux

package probe

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/probe/nodesim"
)

// agentStartTimeout bounds the wait for the probe's agent to answer. It is
// generous: on a busy machine, loading and verifying the eBPF programs
// alone can take more than 10 s.
const agentStartTimeout = 60 * time.Second

// agentProc is the lockstep agent running inside the probe's node.
type agentProc struct {
	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error
	logPath string
}

// agentFlags are the optional agent flags the probe passes when the
// binary knows them: with an older binary the probe still runs, but no
// policy is enforced.
type agentFlags struct {
	manifests, bpfRoot, dataplane bool
}

// detectAgentFlags asks the binary which optional agent flags it accepts.
func detectAgentFlags(ctx context.Context, binary string) (agentFlags, error) {
	out, err := exec.CommandContext(ctx, binary, "agent", "--help").CombinedOutput()
	if err != nil {
		return agentFlags{}, fmt.Errorf("run %s agent --help: %w\n%s", binary, err, out)
	}
	help := string(out)
	return agentFlags{
		manifests: strings.Contains(help, "--manifests"),
		bpfRoot:   strings.Contains(help, "--bpf-root"),
		dataplane: strings.Contains(help, "--dataplane"),
	}, nil
}

// startAgent starts `lockstep agent --standalone` inside the node in its
// own process group (so a Ctrl-C at the terminal reaches the prober, which
// then stops it in order) with the parent-death signal set (so it dies
// with a prober killed outright), and waits until it answers on its socket.
func startAgent(ctx context.Context, node *nodesim.Node, binary string, args []string) (*agentProc, error) {
	logFile, err := os.OpenFile(node.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open agent log: %w", err)
	}
	defer logFile.Close()
	cmd := exec.Command(binary, append([]string{"agent"}, args...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	a := &agentProc{cmd: cmd, done: make(chan struct{}), logPath: node.LogPath}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal fires when the forking *thread* exits,
		// and the runtime retires any thread a goroutine leaves locked (as
		// nodesim.Create does), so the agent is forked from a thread of
		// its own, locked in the node namespace until the agent is reaped.
		// The thread is never unlocked: the runtime retires it afterwards.
		runtime.LockOSThread()
		err := node.NS.Set()
		if err == nil {
			err = cmd.Start()
		}
		started <- err
		if err == nil {
			a.waitErr = cmd.Wait()
			close(a.done)
		}
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("start agent: %w", err)
	}

	client := api.NewClient(node.Socket, 500*time.Millisecond)
	defer client.Close()
	deadline := time.Now().Add(agentStartTimeout)
	for {
		if _, err := client.Status(ctx); err == nil {
			return a, nil
		}
		select {
		case <-a.done:
			return nil, fmt.Errorf("agent exited during start-up (%v); log:\n%s", a.waitErr, a.log())
		case <-ctx.Done():
			a.stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			a.stop()
			return nil, fmt.Errorf("agent did not answer on %s within %s; log:\n%s", node.Socket, agentStartTimeout, a.log())
		}
	}
}

func (a *agentProc) log() string {
	b, _ := os.ReadFile(a.logPath)
	return strings.TrimSpace(string(b))
}

// exited returns an error when the agent is no longer running.
func (a *agentProc) exited() error {
	select {
	case <-a.done:
		return fmt.Errorf("agent exited during the probe (%v); log:\n%s", a.waitErr, a.log())
	default:
		return nil
	}
}

// stop SIGTERMs the agent's process group, then SIGKILLs it after a grace
// period, and waits for the agent to be gone.
func (a *agentProc) stop() {
	pgid := a.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(3 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-a.done
	}
	// Anything the agent started in its group goes with it.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// binDir makes a CNI_PATH directory with lockstep and lockstep-cni linked
// to binary, which dispatches on the name it runs as.
func binDir(dir, binary string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("create plugin dir: %w", err)
	}
	for _, name := range []string{"lockstep", "lockstep-cni"} {
		if err := os.Symlink(binary, filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("link %s: %w", name, err)
		}
	}
	return nil
}
