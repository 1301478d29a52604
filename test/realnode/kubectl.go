//go:build linux

package realnode

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// KubectlIn runs kubectl with the admin kubeconfig, stdin piped in when not
// empty (for apply -f -), and returns its stdout.
func (c *Cluster) KubectlIn(ctx context.Context, stdin string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, c.KubectlPath, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// Kubectl runs kubectl with the admin kubeconfig and returns its stdout.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) ([]byte, error) {
	return c.KubectlIn(ctx, "", args...)
}

// GetJSON runs `kubectl get ARGS -o json` and decodes the result into v.
func (c *Cluster) GetJSON(ctx context.Context, v any, args ...string) error {
	out, err := c.Kubectl(ctx, append(append([]string{"get"}, args...), "-o", "json")...)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("decode kubectl get %s: %w", strings.Join(args, " "), err)
	}
	return nil
}

// Poll calls f every interval until it returns true or an error, or timeout
// passes; on timeout the error says what was waited for and f's last word.
func Poll(ctx context.Context, timeout, interval time.Duration, what string, f func() (bool, string, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last string
	for {
		ok, why, err := f()
		if err != nil {
			return fmt.Errorf("wait for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		last = why
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: not after %s: %s", what, timeout, last)
		case <-time.After(interval):
		}
	}
}

// nodeList is the part of a NodeList the harness reads.
type nodeList struct {
	Items []struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Status struct {
			Conditions []struct {
				Type    string `json:"type"`
				Status  string `json:"status"`
				Message string `json:"message"`
			} `json:"conditions"`
		} `json:"status"`
	} `json:"items"`
}

// waitNodesRegistered waits until every node's kubelet has registered its
// Node.
func (c *Cluster) waitNodesRegistered(ctx context.Context) error {
	return Poll(ctx, 3*time.Minute, time.Second, "every node to register", func() (bool, string, error) {
		var nl nodeList
		if err := c.GetJSON(ctx, &nl, "nodes"); err != nil {
			return false, err.Error(), nil
		}
		if len(nl.Items) < len(c.Nodes) {
			return false, fmt.Sprintf("%d of %d nodes registered", len(nl.Items), len(c.Nodes)), nil
		}
		return true, "", nil
	})
}

// WaitNodesReady waits until every node is Ready.
func (c *Cluster) WaitNodesReady(ctx context.Context, timeout time.Duration) error {
	return Poll(ctx, timeout, time.Second, "every node to be Ready", func() (bool, string, error) {
		var nl nodeList
		if err := c.GetJSON(ctx, &nl, "nodes"); err != nil {
			return false, err.Error(), nil
		}
		var notReady []string
		for _, n := range nl.Items {
			ready := false
			msg := "no Ready condition"
			for _, cond := range n.Status.Conditions {
				if cond.Type == "Ready" {
					ready, msg = cond.Status == "True", cond.Message
				}
			}
			if !ready {
				notReady = append(notReady, n.Metadata.Name+": "+msg)
			}
		}
		if len(nl.Items) < len(c.Nodes) {
			notReady = append(notReady, fmt.Sprintf("%d of %d nodes registered", len(nl.Items), len(c.Nodes)))
		}
		return len(notReady) == 0, strings.Join(notReady, "; "), nil
	})
}

// stageImages links the image archives into the cluster directory, where
// every node's init imports them from.
func stageImages(l Layout, images []string) ([]string, error) {
	if err := os.MkdirAll(l.imagesDir(), 0o755); err != nil {
		return nil, fmt.Errorf("create images dir: %w", err)
	}
	var out []string
	for _, img := range images {
		abs, err := filepath.Abs(img)
		if err != nil {
			return nil, err
		}
		if _, err := os.Stat(abs); err != nil {
			return nil, fmt.Errorf("stage image: %w", err)
		}
		dst := filepath.Join(l.imagesDir(), filepath.Base(abs))
		_ = os.Remove(dst)
		if err := os.Link(abs, dst); err != nil {
			b, rerr := os.ReadFile(abs)
			if rerr != nil {
				return nil, fmt.Errorf("stage image %s: %w", abs, rerr)
			}
			if err := os.WriteFile(dst, b, 0o644); err != nil {
				return nil, fmt.Errorf("stage image %s: %w", abs, err)
			}
		}
		out = append(out, dst)
	}
	return out, nil
}
