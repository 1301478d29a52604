//go:build linux

package realnode

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"lockstep.dev/lockstep/test/kubetest"
)

// identity is a user of the API server, authenticated by a static token.
type identity struct {
	user   string
	groups []string
	token  string
}

// pki is the cluster's certificate authority, the API server's serving
// certificate, the service-account signing key and one token per identity.
type pki struct {
	dir    string
	caPEM  []byte
	tokens map[string]identity // by kubeconfig name
}

// Files in the pki directory.
func (p *pki) caFile() string     { return filepath.Join(p.dir, "ca.crt") }
func (p *pki) serverCert() string { return filepath.Join(p.dir, "apiserver.crt") }
func (p *pki) serverKey() string  { return filepath.Join(p.dir, "apiserver.key") }
func (p *pki) saKey() string      { return filepath.Join(p.dir, "sa.key") }
func (p *pki) saPub() string      { return filepath.Join(p.dir, "sa.pub") }
func (p *pki) tokenFile() string  { return filepath.Join(p.dir, "tokens.csv") }
func (p *pki) kubeconfig(n string) string {
	return filepath.Join(p.dir, n+".kubeconfig")
}

// newPKI writes a fresh CA, serving certificate, service-account key pair
// and token file to dir, for an API server reachable at the given names and
// addresses.
func newPKI(dir string, names []string, ips []net.IP, ids map[string]identity) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create pki dir: %w", err)
	}
	p := &pki{dir: dir, tokens: ids}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate CA key: %w", err)
	}
	now := time.Now().Add(-time.Hour)
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "lockstep-e2e-ca"},
		NotBefore:             now,
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create CA certificate: %w", err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	if err := os.WriteFile(p.caFile(), p.caPEM, 0o644); err != nil {
		return nil, fmt.Errorf("write CA: %w", err)
	}

	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate serving key: %w", err)
	}
	srv := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now,
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     names,
		IPAddresses:  ips,
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create serving certificate: %w", err)
	}
	if err := writePEM(p.serverCert(), "CERTIFICATE", srvDER, 0o644); err != nil {
		return nil, err
	}
	if err := writeECKey(p.serverKey(), srvKey); err != nil {
		return nil, err
	}

	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate service-account key: %w", err)
	}
	if err := writeECKey(p.saKey(), saKey); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("encode service-account public key: %w", err)
	}
	if err := writePEM(p.saPub(), "PUBLIC KEY", pub, 0o644); err != nil {
		return nil, err
	}

	var csv strings.Builder
	for name, id := range ids {
		tok := make([]byte, 24)
		if _, err := rand.Read(tok); err != nil {
			return nil, fmt.Errorf("generate token: %w", err)
		}
		id.token = hex.EncodeToString(tok)
		ids[name] = id
		fmt.Fprintf(&csv, "%s,%s,%s,%q\n", id.token, id.user, id.user, strings.Join(id.groups, ","))
	}
	if err := os.WriteFile(p.tokenFile(), []byte(csv.String()), 0o600); err != nil {
		return nil, fmt.Errorf("write token file: %w", err)
	}
	return p, nil
}

// writeKubeconfig writes a kubeconfig for identity name reaching server.
func (p *pki) writeKubeconfig(path, name, server string) error {
	id, ok := p.tokens[name]
	if !ok {
		return fmt.Errorf("write kubeconfig: no identity %q", name)
	}
	return kubetest.WriteKubeconfig(path, "lockstep-e2e", server, p.caPEM, id.user, id.token)
}

func writeECKey(path string, k *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		return fmt.Errorf("encode key: %w", err)
	}
	return writePEM(path, "EC PRIVATE KEY", der, 0o600)
}

func writePEM(path, typ string, der []byte, mode os.FileMode) error {
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), mode); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}
