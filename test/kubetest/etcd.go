//go:build linux

package kubetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"time"
)

// startEtcd starts a single-member etcd with its data in dir/etcd, client
// and peer URLs on free loopback ports, and waits until it reports healthy.
// It returns the client URL.
func (e *Env) startEtcd(ctx context.Context) (string, error) {
	var env []string
	if runtime.GOARCH != "amd64" {
		// etcd 3.4 refuses to run on other architectures unless told.
		env = append(env, "ETCD_UNSUPPORTED_ARCH="+runtime.GOARCH)
	}
	for attempt := 1; ; attempt++ {
		clientPort, err := freePort()
		if err != nil {
			return "", err
		}
		peerPort, err := freePort()
		if err != nil {
			return "", err
		}
		client, peer := loopbackURL("http", clientPort), loopbackURL("http", peerPort)
		args := []string{
			"--name=kubetest",
			"--data-dir=" + filepath.Join(e.Dir, "etcd"),
			"--listen-client-urls=" + client,
			"--advertise-client-urls=" + client,
			"--listen-peer-urls=" + peer,
			"--initial-advertise-peer-urls=" + peer,
			"--initial-cluster=kubetest=" + peer,
			"--initial-cluster-state=new",
			"--logger=zap",
			"--log-outputs=stderr",
		}
		p, err := startProcess("etcd", e.bin.etcd, args, env, filepath.Join(e.Dir, "etcd.log"))
		if err != nil {
			return "", err
		}
		e.etcd = p
		err = p.waitReady(ctx, func(ctx context.Context) error { return etcdHealthy(ctx, client) })
		if err == nil {
			return client, nil
		}
		if !p.exited() || !p.portInUse() || attempt == 3 {
			return "", err
		}
		e.logf("kubetest: etcd lost a port race, retrying")
		if err := os.RemoveAll(filepath.Join(e.Dir, "etcd")); err != nil {
			return "", fmt.Errorf("remove etcd data before retry: %w", err)
		}
	}
}

// etcdHealthy asks etcd's /health endpoint, which answers {"health":"true"}
// once the member has a leader and serves requests.
func etcdHealthy(ctx context.Context, clientURL string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, clientURL+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return err
	}
	var h struct {
		Health string `json:"health"`
	}
	if err := json.Unmarshal(body, &h); err != nil || h.Health != "true" {
		return fmt.Errorf("etcd /health: %s %s", resp.Status, body)
	}
	return nil
}
