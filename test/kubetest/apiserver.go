//go:build linux

package kubetest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// The identity the Env's token authenticates as. system:masters is bound to
// cluster-admin by the RBAC bootstrap policy, so the token can do anything.
const (
	adminUser  = "kubetest-admin"
	adminGroup = "system:masters"
)

// serviceClusterIPRange is the range Services get their ClusterIPs from.
// Nothing routes or listens there: the apiserver only allocates from it.
const serviceClusterIPRange = "10.96.0.0/24"

// writeSecrets writes the files the apiserver reads at start: the static
// token file and the service-account signing key pair. The serving
// certificate is the apiserver's own (--cert-dir).
func (e *Env) writeSecrets() error {
	tok := make([]byte, 32)
	if _, err := rand.Read(tok); err != nil {
		return fmt.Errorf("generate admin token: %w", err)
	}
	e.Token = hex.EncodeToString(tok)
	tokens := fmt.Sprintf("%s,%s,%s,%q\n", e.Token, adminUser, adminUser, adminGroup)
	if err := os.WriteFile(filepath.Join(e.Dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		return fmt.Errorf("write token file: %w", err)
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return fmt.Errorf("generate service-account key: %w", err)
	}
	priv, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return fmt.Errorf("encode service-account key: %w", err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return fmt.Errorf("encode service-account public key: %w", err)
	}
	if err := writePEM(filepath.Join(e.Dir, "sa.key"), "EC PRIVATE KEY", priv); err != nil {
		return err
	}
	return writePEM(filepath.Join(e.Dir, "sa.pub"), "PUBLIC KEY", pub)
}

// writePEM writes one PEM block to path, readable only by its owner.
func writePEM(path, typ string, der []byte) error {
	b := pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}

// apiserverArgs are kube-apiserver's flags for this Env, then the caller's.
func (e *Env) apiserverArgs() []string {
	args := []string{
		"--etcd-servers=" + e.EtcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		// The "kubernetes" Service gets no endpoints: the only address
		// this apiserver has is loopback, which Endpoints may not hold,
		// and advertising the host's address would point Service
		// traffic somewhere nothing listens.
		"--endpoint-reconciler-type=none",
		"--secure-port=" + strconv.Itoa(e.port),
		"--cert-dir=" + filepath.Join(e.Dir, "certs"),
		"--token-auth-file=" + filepath.Join(e.Dir, "tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + filepath.Join(e.Dir, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(e.Dir, "sa.key"),
		// No controller-manager makes each namespace's default service
		// account, so pods must be admitted without one.
		"--disable-admission-plugins=ServiceAccount",
		"--service-cluster-ip-range=" + serviceClusterIPRange,
		"--allow-privileged=true",
		"--profiling=false",
	}
	return append(args, e.opts.APIServerArgs...)
}

// startAPIServer starts kube-apiserver and waits until /readyz passes. The
// first start picks the port; later ones (a restart) reuse it, so Host and
// the kubeconfig stay valid.
func (e *Env) startAPIServer(ctx context.Context) error {
	for attempt := 1; ; attempt++ {
		if e.port == 0 || attempt > 1 {
			port, err := freePort()
			if err != nil {
				return err
			}
			e.port = port
		}
		e.Host = loopbackURL("https", e.port)
		p, err := startProcess("kube-apiserver", e.bin.apiserver, e.apiserverArgs(), nil,
			filepath.Join(e.Dir, "kube-apiserver.log"))
		if err != nil {
			return err
		}
		e.apiserver = p
		err = p.waitReady(ctx, e.apiserverReady)
		if err == nil {
			return nil
		}
		if !p.exited() || !p.portInUse() || attempt == 3 || e.restarts > 0 {
			return err
		}
		e.logf("kubetest: kube-apiserver lost a port race, retrying")
	}
}

// apiserverReady loads the CA once the apiserver has written its
// certificate, then asks /readyz, which passes only when etcd is reachable
// and every post-start hook (RBAC bootstrap roles, the default namespaces,
// priority classes) has finished.
func (e *Env) apiserverReady(ctx context.Context) error {
	if e.transport == nil {
		if err := e.loadCA(); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.Host+"/readyz", nil)
	if err != nil {
		return err
	}
	resp, err := e.HTTPClient().Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %s %s", resp.Status, body)
	}
	return nil
}

// loadCA reads the self-signed chain the apiserver wrote to its cert dir
// (serving certificate, then the CA that signed it), keeps the CA in CAFile
// and trusts it from then on. The file appears shortly after the process
// starts and may be read half-written, so an error here only means "not
// yet".
func (e *Env) loadCA() error {
	b, err := os.ReadFile(filepath.Join(e.Dir, "certs", "apiserver.crt"))
	if err != nil {
		return fmt.Errorf("read serving certificate: %w", err)
	}
	var ca *x509.Certificate
	for rest := b; ; {
		var blk *pem.Block
		if blk, rest = pem.Decode(rest); blk == nil {
			break
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return fmt.Errorf("parse serving certificate: %w", err)
		}
		if c.IsCA {
			ca = c
		}
	}
	if ca == nil {
		return errors.New("serving certificate chain has no CA yet")
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
	e.CAFile = filepath.Join(e.Dir, "ca.crt")
	if err := os.WriteFile(e.CAFile, caPEM, 0o644); err != nil {
		return fmt.Errorf("write CA file: %w", err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	e.caPEM = caPEM
	e.http = &http.Transport{
		TLSClientConfig:   &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2: true,
	}
	e.transport = &bearerTransport{token: e.Token, base: e.http}
	return nil
}

// HTTPClient returns a client that trusts the apiserver's CA and sends the
// admin token with every request, for tests that speak the REST API
// directly. It has no timeout, since a watch lasts as long as the test
// wants: bound requests with their context. Clients share one connection
// pool, which survives [Env.RestartAPIServer].
func (e *Env) HTTPClient() *http.Client {
	return &http.Client{Transport: e.transport}
}

// bearerTransport adds an Authorization header to each request.
type bearerTransport struct {
	token string
	base  http.RoundTripper
}

// RoundTrip implements http.RoundTripper.
func (t *bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+t.token)
	return t.base.RoundTrip(req)
}
