package client

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "lockstep.dev/lockstep/kube/api/meta/v1"
	"lockstep.dev/lockstep/kube/api/schema"
)

// TestTokenFileIsReadAgain: a token file is read at the first request and
// again once tokenFileReload has passed (kubelet rotates service account
// tokens); a file that vanishes keeps the last token in use.
func TestTokenFileIsReadAgain(t *testing.T) {
	file := filepath.Join(t.TempDir(), "token")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(file, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	get := func(ts *tokenSource, want string) {
		t.Helper()
		got, err := ts.get()
		if err != nil || got != want {
			t.Fatalf("token %q (%v), want %q", got, err, want)
		}
	}
	write("one\n")
	ts := newTokenSource("from-config", file)
	get(ts, "one")
	write("two\n")
	get(ts, "one")
	ts.readAt = ts.readAt.Add(-tokenFileReload - time.Second)
	get(ts, "two")
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	ts.readAt = ts.readAt.Add(-tokenFileReload - time.Second)
	get(ts, "two")

	if _, err := newTokenSource("", file).get(); err == nil {
		t.Fatal("a missing token file with no token to stand in gave no error")
	}
	write("\n")
	if _, err := newTokenSource("", file).get(); err == nil || !strings.Contains(err.Error(), "empty") {
		t.Fatalf("an empty token file: %v, want an error saying so", err)
	}
	get(newTokenSource("static", ""), "static")
	if newTokenSource("", "") != nil {
		t.Fatal("no token and no file should give no source")
	}
}

// TestClientCertificateFilesAreReadAgain: a client certificate given as
// files is read again once certReload has passed, and a changed one closes
// the connections made with the old one, so that the next request (on an
// HTTP/2 connection kept open, as a watch's is) presents the new one.
func TestClientCertificateFilesAreReadAgain(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "client.crt"), filepath.Join(dir, "client.key")
	writePair := func(cn string) {
		t.Helper()
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		kb, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var seenCN atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(r.TLS.PeerCertificates) > 0 {
			seenCN.Store(r.TLS.PeerCertificates[0].Subject.CommonName)
		}
		if r.URL.Query().Get("watch") == "true" {
			w.(http.Flusher).Flush()
			<-r.Context().Done()
			return
		}
		_, _ = w.Write([]byte(`{}`))
	}))
	srv.EnableHTTP2 = true
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAnyClientCert}
	srv.StartTLS()
	defer srv.Close()

	writePair("one")
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	rest, err := newREST(&Config{Host: srv.URL, CAData: ca, CertFile: certFile, KeyFile: keyFile, QPS: -1}, schema.GroupVersion{Version: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	get := func(want string) {
		t.Helper()
		if err := rest.Get().Resource("namespaces").Do(t.Context()).Error(); err != nil {
			t.Fatal(err)
		}
		if got, _ := seenCN.Load().(string); got != want {
			t.Fatalf("client certificate %q, want %q", got, want)
		}
	}
	get("one")
	// A watch keeps its connection busy across the rotation.
	w, err := rest.Get().Resource("pods").Watch(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	writePair("two")
	get("one") // not read again yet; the connection is reused
	certs := rest.http.Transport.(*authRoundTripper).certs
	certs.mu.Lock()
	certs.checkedAt = certs.checkedAt.Add(-certReload)
	certs.mu.Unlock()
	get("two")
	select {
	case _, ok := <-w.ResultChan():
		if ok {
			t.Fatal("an event on the old connection")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the watch on the connection made with the old certificate was not ended")
	}
}

// TestExecPluginChildCannotHangRequests: a plugin killed at execTimeout
// whose child still holds its output lets go within execWaitDelay.
func TestExecPluginChildCannotHangRequests(t *testing.T) {
	defer func(timeout, delay time.Duration) { execTimeout, execWaitDelay = timeout, delay }(execTimeout, execWaitDelay)
	execTimeout, execWaitDelay = 200*time.Millisecond, 200*time.Millisecond
	plugin := filepath.Join(t.TempDir(), "hang")
	if err := os.WriteFile(plugin, []byte("#!/bin/sh\nsleep 30 &\nwait\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	a, err := newExecAuth(&Config{Host: "https://127.0.0.1:1", ExecProvider: &ExecConfig{Command: plugin, APIVersion: "client.authentication.k8s.io/v1"}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := a.bearer(); err == nil {
		t.Fatal("a plugin that never answered gave a token")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the plugin's child held the request for %s", d)
	}
}

// TestStalledWatchIsGivenUp: a watch whose server sends nothing past the
// timeoutSeconds it was asked for ends watchGrace later.
func TestStalledWatchIsGivenUp(t *testing.T) {
	defer func(g time.Duration) { watchGrace = g }(watchGrace)
	watchGrace = 100 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.(http.Flusher).Flush()
		<-r.Context().Done() // never ends the watch itself
	}))
	defer srv.Close()
	rest, err := newREST(&Config{Host: srv.URL}, schema.GroupVersion{Version: "v1"})
	if err != nil {
		t.Fatal(err)
	}
	one := int64(1)
	w, err := rest.Get().Resource("pods").VersionedParams(&metav1.ListOptions{TimeoutSeconds: &one}, metav1.ParameterCodec).Watch(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	select {
	case _, ok := <-w.ResultChan():
		if ok {
			t.Fatal("an event from a server that sent none")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a stalled watch was not given up")
	}
}
