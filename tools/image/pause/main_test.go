//go:build linux

package main

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// TestReapCollectsExitedChildren: children that exited while nobody
// waited for them are zombies until reap collects them all at once.
func TestReapCollectsExitedChildren(t *testing.T) {
	var pids []int
	for range 3 {
		cmd := exec.Command("true")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, cmd.Process.Pid)
	}
	// Let them exit; they stay zombies as nobody waits.
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for !isZombie(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("child %d did not exit", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	if n := reap(); n != len(pids) {
		t.Fatalf("reap() = %d, want %d", n, len(pids))
	}
	for _, pid := range pids {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("child %d still in /proc after reap: %v", pid, err)
		}
	}
	if n := reap(); n != 0 {
		t.Errorf("a second reap() = %d, want 0", n)
	}
}

func TestWaitStopsOnTermAndInt(t *testing.T) {
	for _, stop := range []os.Signal{syscall.SIGTERM, syscall.SIGINT} {
		t.Run(stop.String(), func(t *testing.T) {
			sigs := make(chan os.Signal, 4)
			sigs <- syscall.SIGCHLD
			sigs <- syscall.SIGCHLD
			sigs <- stop
			sigs <- syscall.SIGCHLD // never read: wait has returned
			if code := wait(sigs); code != 0 {
				t.Fatalf("wait() = %d, want 0", code)
			}
			if len(sigs) != 1 {
				t.Errorf("wait read past %v: %d signals left, want 1", stop, len(sigs))
			}
		})
	}
}

func isZombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// pid (comm) S ...: the state follows the last ')'.
	for i := len(b) - 1; i >= 0; i-- {
		if b[i] == ')' {
			return i+2 < len(b) && b[i+2] == 'Z'
		}
	}
	return false
}
