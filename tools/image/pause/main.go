//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// version is what `pause -v` prints.
const version = "lockstep-pause 1.0 (registry.k8s.io/pause 3.10 compatible)"

func main() {
	if len(os.Args) > 1 {
		if os.Args[1] == "-v" {
			fmt.Println(version)
			return
		}
		fmt.Fprintln(os.Stderr, "usage: pause [-v]")
		os.Exit(1)
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "pause: warning: not running as PID 1, orphans are reaped by someone else")
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	os.Exit(wait(sigs))
}

// wait reaps children on every SIGCHLD until SIGTERM or SIGINT arrives,
// and returns the exit code: 0, as a sandbox told to stop has done its job.
func wait(sigs <-chan os.Signal) int {
	for sig := range sigs {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		return 0
	}
	return 0
}

// reap collects every child that has exited, without blocking, and returns
// how many. One SIGCHLD may stand for several children.
func reap() int {
	n := 0
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return n
		}
		n++
	}
}
