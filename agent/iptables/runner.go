package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
)

// Runner runs one command: the iptables and ipset tools. Every command the
// package runs goes through a Runner, so tests can record payloads and
// inject failures, and so a caller can enter a network namespace first.
type Runner interface {
	// Run runs name with args, feeding stdin (nil: no input), and returns
	// its standard output. A command that ran and failed returns an error
	// that wraps *ExitError.
	Run(ctx context.Context, name string, args []string, stdin []byte) ([]byte, error)
}

// ExitError is a command that ran and failed: it carries the exit code and
// what the tool wrote to stderr, which is usually the only explanation
// (e.g. "Set cannot be destroyed: it is in use by a kernel component").
type ExitError struct {
	// Command is the command line, for messages.
	Command string
	// Code is the exit status; -1 when the process did not exit normally
	// (killed, e.g. by the context ending).
	Code int
	// Stderr is the tool's standard error, trimmed.
	Stderr string
	// Err is the underlying error (e.g. *exec.ExitError).
	Err error
}

// Error returns "COMMAND: exit status N: STDERR".
func (e *ExitError) Error() string {
	msg := fmt.Sprintf("%s: exit status %d", e.Command, e.Code)
	if e.Code < 0 && e.Err != nil {
		msg = fmt.Sprintf("%s: %v", e.Command, e.Err)
	}
	if e.Stderr != "" {
		msg += ": " + e.Stderr
	}
	return msg
}

// Unwrap returns the underlying error.
func (e *ExitError) Unwrap() error { return e.Err }

// ExecRunner runs commands with os/exec, in the caller's network namespace
// (on Linux, the namespace of the thread that forks: call it inside ns.Do
// to act on another namespace).
type ExecRunner struct {
	// Env, when set, is the commands' environment instead of the agent's.
	Env []string
}

// Run implements Runner.
func (r ExecRunner) Run(ctx context.Context, name string, args []string, stdin []byte) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	if r.Env != nil {
		cmd.Env = r.Env
	}
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err == nil {
		return stdout.Bytes(), nil
	}
	line := commandLine(name, args)
	if errors.Is(err, exec.ErrNotFound) {
		return nil, fmt.Errorf("run %s: %w (install the iptables and ipset packages)", line, err)
	}
	code := -1
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	}
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return stdout.Bytes(), &ExitError{Command: line, Code: code, Stderr: strings.TrimSpace(stderr.String()), Err: err}
}

func commandLine(name string, args []string) string {
	if len(args) == 0 {
		return name
	}
	return name + " " + strings.Join(args, " ")
}
