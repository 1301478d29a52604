//go:build linux

package realnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"lockstep.dev/lockstep/agent/api"
)

// RepoRoot walks up from the working directory to the lockstep repository
// (the directory holding deploy/kustomization.yaml and go.mod).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find repository: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "deploy", "kustomization.yaml")); err == nil {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				return dir, nil
			}
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find repository: no deploy/kustomization.yaml above the working directory; run from inside the lockstep repository")
		}
		dir = parent
	}
}

// InstallLockstep installs lockstep as its README tells a user to:
// `kubectl apply -k deploy`, then the example IPPools; with the iptables
// dataplane it then sets it in the lockstep-config ConfigMap and restarts
// the agents, as a user switching dataplanes does. It returns once every
// node is Ready, lockstep's agents and operator are, and the cluster DNS
// (the first pods to need the pod network) is.
func (c *Cluster) InstallLockstep(ctx context.Context, repo, dataplane string) error {
	t0 := time.Now()
	if _, err := c.Kubectl(ctx, "apply", "-k", filepath.Join(repo, "deploy")); err != nil {
		return err
	}
	if _, err := c.Kubectl(ctx, "apply", "-f", filepath.Join(repo, "deploy", "examples", "ippools.yaml")); err != nil {
		return err
	}
	if dataplane != "" && dataplane != "ebpf" {
		if err := c.SetDataplane(ctx, dataplane); err != nil {
			return err
		}
	}
	if err := c.WaitLockstep(ctx, 5*time.Minute); err != nil {
		return err
	}
	// The first pods of the pod network: the cluster DNS.
	if _, err := c.Kubectl(ctx, "-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=3m"); err != nil {
		return err
	}
	c.logf("realnode: lockstep installed, every node Ready and the cluster DNS up in %s", time.Since(t0).Round(time.Millisecond))
	return nil
}

// SetDataplane switches lockstep's dataplane through its ConfigMap and
// restarts the agents, waiting for the rollout.
func (c *Cluster) SetDataplane(ctx context.Context, dataplane string) error {
	return c.SetConfig(ctx, map[string]string{"dataplane": dataplane})
}

// SetConfig sets keys of lockstep's ConfigMap (deploy/config.yaml) and
// restarts the agents, which read it at start, as a user changing a
// setting does; it waits for the rollout.
func (c *Cluster) SetConfig(ctx context.Context, data map[string]string) error {
	patch, err := json.Marshal(map[string]any{"data": data})
	if err != nil {
		return fmt.Errorf("encode lockstep-config patch: %w", err)
	}
	if _, err := c.Kubectl(ctx, "-n", "kube-system", "patch", "configmap", "lockstep-config", "--type", "merge", "-p", string(patch)); err != nil {
		return err
	}
	if _, err := c.Kubectl(ctx, "-n", "kube-system", "rollout", "restart", "daemonset/lockstep-agent"); err != nil {
		return err
	}
	return c.WaitLockstep(ctx, 5*time.Minute)
}

// WaitLockstep waits until the agents' DaemonSet and the operator's
// Deployment have rolled out and every node is Ready.
func (c *Cluster) WaitLockstep(ctx context.Context, timeout time.Duration) error {
	wait := fmt.Sprintf("--timeout=%s", timeout)
	for _, obj := range []string{"daemonset/lockstep-agent", "deployment/lockstep-operator"} {
		if _, err := c.Kubectl(ctx, "-n", "kube-system", "rollout", "status", obj, wait); err != nil {
			return err
		}
	}
	return c.WaitNodesReady(ctx, timeout)
}

// Dataplane returns the dataplane the lockstep-config ConfigMap asks for
// ("ebpf", the agents' default, when it names none).
func (c *Cluster) Dataplane(ctx context.Context) (string, error) {
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := c.GetJSON(ctx, &cm, "-n", "kube-system", "configmap", "lockstep-config"); err != nil {
		return "", err
	}
	if dp := cm.Data["dataplane"]; dp != "" {
		return dp, nil
	}
	return "ebpf", nil
}

// AgentStatus is what `lockstep status -o json` says on node h, run as an
// operator would, with the binary install-cni put there.
func (c *Cluster) AgentStatus(ctx context.Context, h Host) (*api.StatusResponse, error) {
	out, err := c.Exec(ctx, h, "/opt/cni/bin/lockstep", "status", "-o", "json")
	if err != nil {
		return nil, err
	}
	var st api.StatusResponse
	if err := json.Unmarshal(out, &st); err != nil {
		return nil, fmt.Errorf("decode lockstep status of %s: %w\n%s", h.Name, err, out)
	}
	return &st, nil
}

// WaitAgentsDataplane waits until the agent of every node says (`lockstep
// status`) that it runs dataplane ("iptables" also matches the
// iptables-nft and iptables-legacy it reports) with no clean-up of another
// one pending: a finished rollout is not yet an agent enforcing through
// the new dataplane.
func (c *Cluster) WaitAgentsDataplane(ctx context.Context, dataplane string, timeout time.Duration) error {
	for _, h := range c.Nodes {
		err := Poll(ctx, timeout, time.Second, "the agent of "+h.Name+" to run the "+dataplane+" dataplane", func() (bool, string, error) {
			st, err := c.AgentStatus(ctx, h)
			if err != nil {
				return false, err.Error(), nil
			}
			if st.Dataplane == nil {
				return false, "no dataplane yet", nil
			}
			if !strings.HasPrefix(st.Dataplane.Name, dataplane) {
				return false, "it runs " + st.Dataplane.Name, nil
			}
			if n := len(st.Dataplane.PendingCleanups); n > 0 {
				return false, fmt.Sprintf("%d clean-ups of another dataplane pending", n), nil
			}
			return true, "", nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}
