package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// Bounds of one run of a credential plugin: how long it may take, how long
// its output pipes may stay open after it is killed (a child it started
// may hold them), and how much of its output is kept.
var (
	execTimeout   = time.Minute
	execWaitDelay = 5 * time.Second
)

const (
	execMaxStdout = 1 << 20
	execMaxStderr = 1 << 10
)

// cappedBuffer keeps the first max bytes written to it and drops the rest.
type cappedBuffer struct {
	bytes.Buffer
	max       int
	truncated bool
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room < len(p) {
		b.truncated = true
		b.Buffer.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

// execAPIVersion reports whether a credential plugin may speak
// ExecCredential version v.
func execAPIVersion(v string) bool {
	return v == "client.authentication.k8s.io/v1" || v == "client.authentication.k8s.io/v1beta1"
}

// execCredential is a plugin's ExecCredential: its input (spec) and its
// output (status).
type execCredential struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Spec       struct {
		Cluster     *execCluster `json:"cluster,omitempty"`
		Interactive bool         `json:"interactive"`
	} `json:"spec"`
	Status *struct {
		ExpirationTimestamp   *time.Time `json:"expirationTimestamp,omitempty"`
		Token                 string     `json:"token,omitempty"`
		ClientCertificateData string     `json:"clientCertificateData,omitempty"`
		ClientKeyData         string     `json:"clientKeyData,omitempty"`
	} `json:"status,omitempty"`
}

// execCluster is the cluster a plugin is told of (ProvideClusterInfo).
type execCluster struct {
	Server                   string `json:"server"`
	TLSServerName            string `json:"tls-server-name,omitempty"`
	InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify,omitempty"`
	CertificateAuthorityData []byte `json:"certificate-authority-data,omitempty"`
	ProxyURL                 string `json:"proxy-url,omitempty"`
	DisableCompression       bool   `json:"disable-compression,omitempty"`
}

// execAuth runs a Config's credential plugin when a request needs a
// credential and none is held or the one held expired or was refused.
type execAuth struct {
	cfg  ExecConfig
	info []byte // KUBERNETES_EXEC_INFO

	// certChanged, when set, is called when a run gives a client
	// certificate other than the one before (the connections made with
	// that one are closed).
	certChanged func()

	mu      sync.Mutex
	token   string
	cert    *tls.Certificate
	expires time.Time // zero: until refused
	valid   bool
}

func newExecAuth(cfg *Config) (*execAuth, error) {
	e := cfg.ExecProvider
	if !execAPIVersion(e.APIVersion) {
		return nil, fmt.Errorf("exec plugin: apiVersion %q: want client.authentication.k8s.io/v1 or v1beta1", e.APIVersion)
	}
	if e.InteractiveMode == "Always" {
		return nil, errors.New("exec plugin: interactiveMode Always needs a terminal, and lockstep runs without one; use Never or IfAvailable")
	}
	in := execCredential{APIVersion: e.APIVersion, Kind: "ExecCredential"}
	if e.ProvideClusterInfo {
		ca := cfg.CAData
		if len(ca) == 0 && cfg.CAFile != "" {
			var err error
			if ca, err = os.ReadFile(cfg.CAFile); err != nil {
				return nil, fmt.Errorf("exec plugin: read certificate-authority: %w", err)
			}
		}
		in.Spec.Cluster = &execCluster{Server: cfg.Host, TLSServerName: cfg.ServerName, InsecureSkipTLSVerify: cfg.Insecure,
			CertificateAuthorityData: ca, DisableCompression: cfg.DisableCompression}
	}
	info, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("exec plugin: encode KUBERNETES_EXEC_INFO: %w", err)
	}
	return &execAuth{cfg: *e, info: info}, nil
}

// bearer returns the plugin's token, running it when none is held.
func (a *execAuth) bearer() (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.refresh(); err != nil {
		return "", err
	}
	return a.token, nil
}

// clientCertificate is the plugin's certificate, or none when it gives a
// token instead.
func (a *execAuth) clientCertificate() (*tls.Certificate, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.refresh(); err != nil {
		return nil, err
	}
	if a.cert == nil {
		return &tls.Certificate{}, nil
	}
	return a.cert, nil
}

// forget drops the credential held, when it is still the token the API
// server refused (a certificate-only credential always): the next request
// runs the plugin again.
func (a *execAuth) forget(refused string) {
	a.mu.Lock()
	if a.token == refused {
		a.valid = false
	}
	a.mu.Unlock()
}

// refresh runs the plugin when the credential held is missing or expired.
// a.mu is held.
func (a *execAuth) refresh() error {
	if a.valid && (a.expires.IsZero() || time.Now().Before(a.expires)) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), execTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, a.cfg.Command, a.cfg.Args...)
	cmd.Env = os.Environ()
	for _, v := range a.cfg.Env {
		cmd.Env = append(cmd.Env, v.Name+"="+v.Value)
	}
	cmd.Env = append(cmd.Env, "KUBERNETES_EXEC_INFO="+string(a.info))
	// Every request of the Config waits for this run (a.mu is held): a
	// plugin whose child hangs on to its output must not hold them past
	// execTimeout and execWaitDelay.
	cmd.WaitDelay = execWaitDelay
	stdout, stderr := &cappedBuffer{max: execMaxStdout}, &cappedBuffer{max: execMaxStderr}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err := cmd.Run()
	if err == nil && stdout.truncated {
		err = fmt.Errorf("its output is over %d bytes", execMaxStdout)
	}
	if err != nil {
		msg := fmt.Sprintf("exec plugin %s: %v", a.cfg.Command, err)
		if s := strings.TrimSpace(stderr.String()); s != "" {
			msg += ": " + s
		}
		if (errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist)) && a.cfg.InstallHint != "" {
			msg += "; " + a.cfg.InstallHint
		}
		return errors.New(msg)
	}
	var out execCredential
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		return fmt.Errorf("exec plugin %s: decode its ExecCredential: %w", a.cfg.Command, err)
	}
	switch {
	case out.APIVersion != a.cfg.APIVersion:
		return fmt.Errorf("exec plugin %s: answered apiVersion %q, configured %q", a.cfg.Command, out.APIVersion, a.cfg.APIVersion)
	case out.Status == nil:
		return fmt.Errorf("exec plugin %s: its ExecCredential has no status", a.cfg.Command)
	case out.Status.Token == "" && (out.Status.ClientCertificateData == "" || out.Status.ClientKeyData == ""):
		return fmt.Errorf("exec plugin %s: its ExecCredential holds neither a token nor a client certificate and key", a.cfg.Command)
	}
	var cert *tls.Certificate
	if out.Status.ClientCertificateData != "" {
		pair, err := tls.X509KeyPair([]byte(out.Status.ClientCertificateData), []byte(out.Status.ClientKeyData))
		if err != nil {
			return fmt.Errorf("exec plugin %s: its client certificate: %w", a.cfg.Command, err)
		}
		cert = &pair
	}
	changed := a.cert != nil && (cert == nil || !sameCert(a.cert, cert))
	a.token, a.cert = out.Status.Token, cert
	if changed && a.certChanged != nil {
		a.certChanged()
	}
	a.expires = time.Time{}
	if t := out.Status.ExpirationTimestamp; t != nil {
		a.expires = *t
	}
	a.valid = true
	return nil
}
