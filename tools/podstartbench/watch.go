//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"sync"
	"time"

	"lockstep.dev/lockstep/test/realnode"
)

// readyWatch records when each pod of a namespace is first seen Ready, from
// one `kubectl get pods --watch` (no polling process competing with the
// pods for the CPU).
type readyWatch struct {
	cmd    *exec.Cmd
	cancel context.CancelFunc
	mu     sync.Mutex
	ready  map[string]time.Time
	err    error
	done   chan struct{}
}

// watchEvent is the part of a watch event the benchmark reads.
type watchEvent struct {
	Object struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Status struct {
			Conditions []struct {
				Type   string `json:"type"`
				Status string `json:"status"`
			} `json:"conditions"`
		} `json:"status"`
	} `json:"object"`
}

// watchReady starts watching ns and returns once the watch is established.
func watchReady(ctx context.Context, c *realnode.Cluster, ns string) (*readyWatch, error) {
	ctx, cancel := context.WithCancel(ctx)
	w := &readyWatch{cancel: cancel, ready: map[string]time.Time{}, done: make(chan struct{})}
	w.cmd = exec.CommandContext(ctx, c.KubectlPath, "--kubeconfig", c.Kubeconfig, "get", "pods", "-n", ns,
		"--watch", "--output-watch-events", "-o", "json")
	out, err := w.cmd.StdoutPipe()
	if err != nil {
		cancel()
		return nil, err
	}
	if err := w.cmd.Start(); err != nil {
		cancel()
		return nil, fmt.Errorf("watch pods: %w", err)
	}
	go func() {
		defer close(w.done)
		dec := json.NewDecoder(out)
		for {
			var ev watchEvent
			if err := dec.Decode(&ev); err != nil {
				w.mu.Lock()
				w.err = fmt.Errorf("watch pods: %w", err)
				w.mu.Unlock()
				return
			}
			now := time.Now()
			for _, cond := range ev.Object.Status.Conditions {
				if cond.Type == "Ready" && cond.Status == "True" {
					w.mu.Lock()
					if _, seen := w.ready[ev.Object.Metadata.Name]; !seen {
						w.ready[ev.Object.Metadata.Name] = now
					}
					w.mu.Unlock()
				}
			}
		}
	}()
	// The watch lists (nothing yet) and then watches; give it the time to
	// be in place before the pods are created.
	time.Sleep(time.Second)
	return w, nil
}

// wait returns the times n pods were first seen Ready, in order.
func (w *readyWatch) wait(n int, timeout time.Duration) ([]time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		w.mu.Lock()
		got, err := len(w.ready), w.err
		var times []time.Time
		if got >= n {
			for _, t := range w.ready {
				times = append(times, t)
			}
		}
		w.mu.Unlock()
		if times != nil {
			slices.SortFunc(times, time.Time.Compare)
			return times, nil
		}
		if err != nil {
			return nil, err
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%d of %d pods Ready after %s", got, n, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (w *readyWatch) stop() {
	w.cancel()
	_ = w.cmd.Wait()
	<-w.done
}
