package client

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"
)

// Transport timings, as client-go's.
const (
	dialTimeout         = 30 * time.Second
	tcpKeepAlive        = 30 * time.Second
	tlsHandshakeTimeout = 10 * time.Second
	idleConnTimeout     = 90 * time.Second
	maxIdleConnsPerHost = 25
	// An HTTP/2 connection that has been silent this long is pinged, and
	// closed when the ping is not answered in time: a watch on a
	// connection to a vanished API server ends instead of hanging.
	h2ReadIdleTimeout = 30 * time.Second
	h2PingTimeout     = 15 * time.Second
	// tokenFileReload is how long a token read from BearerTokenFile is
	// used before the file is read again.
	tokenFileReload = time.Minute
)

// certReload is how often a client certificate read from files is read
// again, as client-go does for a rotated one (kubelet's
// kubelet-client-current.pem).
const certReload = 5 * time.Minute

// transportKey is what makes two Configs' connections interchangeable:
// the same TLS identity and trust, and compression. Configs with an exec
// plugin share theirs only with Configs of the same plugin (the same
// *ExecConfig, as ForGroup's clients of one loaded Config have), so that
// the plugin runs once for all of them.
type transportKey struct {
	caFile, caData, certFile, certData, keyFile, keyData, serverName string
	insecure, disableCompression                                     bool
	exec                                                             *ExecConfig
}

// connection is a Config's way to the API server: the transport, and what
// may change its client certificate (a plugin, files), with the
// connections to close when it does.
type connection struct {
	transport *http.Transport
	exec      *execAuth    // nil: no plugin
	certs     *certSource  // nil: the certificate cannot change
	conns     *connTracker // with certs
}

// closeConns closes every connection the transport made, idle or busy: its
// client certificate changed. Requests in flight on them fail (a watch
// is started again by its informer).
func (c *connection) closeConns() {
	c.transport.CloseIdleConnections()
	c.conns.closeAll()
}

var (
	transportsMu sync.Mutex
	// connections are shared by the clients of equal Configs, as
	// client-go's TLS cache shares them: the clients of each API group
	// an agent uses share its connections to the API server.
	connections map[transportKey]*connection // made on first use: no init work
)

// roundTripper returns the transport of cfg's connections, wrapped to add
// its credentials, impersonation and user agent to every request.
func (cfg *Config) roundTripper() (http.RoundTripper, error) {
	if (cfg.BearerToken != "" || cfg.BearerTokenFile != "") && (cfg.Username != "" || cfg.Password != "") {
		return nil, errors.New("username/password or bearer token may be set, but not both")
	}
	conn, err := cfg.connection()
	if err != nil {
		return nil, err
	}
	a := &authRoundTripper{
		next: conn.transport, exec: conn.exec, certs: conn.certs,
		username: cfg.Username, password: cfg.Password,
		impersonate: cfg.Impersonate,
		userAgent:   cfg.UserAgent,
	}
	if a.userAgent == "" {
		a.userAgent = DefaultUserAgent()
	}
	if cfg.isTLS() {
		a.token = newTokenSource(cfg.BearerToken, cfg.BearerTokenFile)
	} else {
		// As clientcmd: credentials only ever go to a TLS server.
		a.username, a.password, a.exec = "", "", nil
	}
	if cfg.WrapTransport != nil {
		return cfg.WrapTransport(a), nil
	}
	return a, nil
}

// connection returns the shared connection for cfg's TLS settings,
// building it on first use. A Config with its own Proxy func gets one of
// its own.
func (cfg *Config) connection() (*connection, error) {
	key := transportKey{
		caFile: cfg.CAFile, caData: string(cfg.CAData), certFile: cfg.CertFile, certData: string(cfg.CertData),
		keyFile: cfg.KeyFile, keyData: string(cfg.KeyData), serverName: cfg.ServerName,
		insecure: cfg.Insecure, disableCompression: cfg.DisableCompression, exec: cfg.ExecProvider,
	}
	shared := cfg.Proxy == nil
	if shared {
		transportsMu.Lock()
		defer transportsMu.Unlock()
		if c, ok := connections[key]; ok {
			return c, nil
		}
	}
	c := &connection{}
	var tracker *connTracker
	if cfg.ExecProvider != nil {
		var err error
		if c.exec, err = newExecAuth(cfg); err != nil {
			return nil, err
		}
	}
	staticCert := len(cfg.CertData) > 0 || len(cfg.KeyData) > 0
	switch {
	case cfg.CertFile != "" && cfg.KeyFile != "" && !staticCert:
		tracker = &connTracker{}
		c.certs = &certSource{certFile: cfg.CertFile, keyFile: cfg.KeyFile, closeConns: c.closeConns}
		if _, err := c.certs.load(); err != nil {
			return nil, err
		}
	case c.exec != nil && cfg.CertFile == "" && !staticCert:
		// The plugin may give a client certificate instead of a token.
		tracker = &connTracker{}
		c.certs = &certSource{exec: c.exec, closeConns: c.closeConns}
		c.exec.certChanged = c.closeConns
	}
	c.conns = tracker
	tlsConfig, err := cfg.tlsConfig(c.certs)
	if err != nil {
		return nil, err
	}
	proxy := cfg.Proxy
	if proxy == nil {
		proxy = http.ProxyFromEnvironment
	}
	dialer := &net.Dialer{Timeout: dialTimeout, KeepAlive: tcpKeepAlive}
	dial := dialer.DialContext
	if tracker != nil {
		dial = tracker.dial(dial)
	}
	c.transport = &http.Transport{
		Proxy:               proxy,
		DialContext:         dial,
		TLSClientConfig:     tlsConfig,
		TLSHandshakeTimeout: tlsHandshakeTimeout,
		MaxIdleConnsPerHost: maxIdleConnsPerHost,
		IdleConnTimeout:     idleConnTimeout,
		DisableCompression:  cfg.DisableCompression,
		ForceAttemptHTTP2:   true,
		HTTP2:               &http.HTTP2Config{SendPingTimeout: h2ReadIdleTimeout, PingTimeout: h2PingTimeout},
	}
	if shared {
		if connections == nil {
			connections = map[transportKey]*connection{}
		}
		connections[key] = c
	}
	return c, nil
}

// tlsConfig builds the TLS settings of cfg: its CA, server name and client
// certificate, static or from certs.
func (cfg *Config) tlsConfig(certs *certSource) (*tls.Config, error) {
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: cfg.ServerName, InsecureSkipVerify: cfg.Insecure} //nolint:gosec // insecure-skip-tls-verify is the kubeconfig's explicit choice
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		var err error
		if ca, err = os.ReadFile(cfg.CAFile); err != nil {
			return nil, fmt.Errorf("read certificate-authority: %w", err)
		}
	}
	if len(ca) > 0 {
		if cfg.Insecure {
			return nil, errors.New("specifying a root certificates file with the insecure flag is not allowed")
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(ca) {
			return nil, errors.New("read certificate-authority: no PEM certificate in it")
		}
		c.RootCAs = pool
	}
	if certs != nil {
		c.GetClientCertificate = certs.get
		return c, nil
	}
	cert, key := cfg.CertData, cfg.KeyData
	if len(cert) == 0 && cfg.CertFile != "" {
		var err error
		if cert, err = os.ReadFile(cfg.CertFile); err != nil {
			return nil, fmt.Errorf("read client-certificate: %w", err)
		}
	}
	if len(key) == 0 && cfg.KeyFile != "" {
		var err error
		if key, err = os.ReadFile(cfg.KeyFile); err != nil {
			return nil, fmt.Errorf("read client-key: %w", err)
		}
	}
	if len(cert) > 0 || len(key) > 0 {
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			return nil, fmt.Errorf("load client certificate: %w", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// certSource is a client certificate that can change: read from files
// (again every certReload) or given by an exec plugin. When it changes,
// the connections made with the old one are closed, as client-go does:
// the API server checks a connection's certificate on every request, and
// an HTTP/2 connection (a watch's) would otherwise keep an expired one.
type certSource struct {
	certFile, keyFile string
	exec              *execAuth
	closeConns        func()

	mu        sync.Mutex
	cert      *tls.Certificate
	checkedAt time.Time
}

// get is the TLS client's GetClientCertificate.
func (s *certSource) get(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
	if s.exec != nil {
		return s.exec.clientCertificate()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cert, nil
}

// load reads the files, reporting whether the certificate changed.
func (s *certSource) load() (bool, error) {
	cert, err := os.ReadFile(s.certFile)
	if err != nil {
		return false, fmt.Errorf("read client-certificate: %w", err)
	}
	key, err := os.ReadFile(s.keyFile)
	if err != nil {
		return false, fmt.Errorf("read client-key: %w", err)
	}
	pair, err := tls.X509KeyPair(cert, key)
	if err != nil {
		return false, fmt.Errorf("load client certificate: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.checkedAt = time.Now()
	changed := s.cert != nil && !sameCert(s.cert, &pair)
	s.cert = &pair
	return changed, nil
}

// check reads the files again once certReload has passed, and closes the
// connections made with the old certificate when it changed; a file that
// cannot be read keeps the certificate in use.
func (s *certSource) check() {
	if s.certFile == "" {
		return
	}
	s.mu.Lock()
	due := time.Since(s.checkedAt) >= certReload
	s.mu.Unlock()
	if !due {
		return
	}
	if changed, err := s.load(); err == nil && changed {
		s.closeConns()
	} else if err != nil {
		s.mu.Lock()
		s.checkedAt = time.Now()
		s.mu.Unlock()
	}
}

func sameCert(a, b *tls.Certificate) bool {
	if len(a.Certificate) != len(b.Certificate) {
		return false
	}
	for i := range a.Certificate {
		if !bytes.Equal(a.Certificate[i], b.Certificate[i]) {
			return false
		}
	}
	return true
}

// connTracker remembers the connections a transport dialled, to close them
// all when the client certificate changes.
type connTracker struct {
	mu    sync.Mutex
	conns map[*trackedConn]struct{}
}

func (t *connTracker) dial(dial func(context.Context, string, string) (net.Conn, error)) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc := &trackedConn{Conn: c, tracker: t}
		t.mu.Lock()
		if t.conns == nil {
			t.conns = map[*trackedConn]struct{}{}
		}
		t.conns[tc] = struct{}{}
		t.mu.Unlock()
		return tc, nil
	}
}

// closeAll closes every connection dialled and still open.
func (t *connTracker) closeAll() {
	t.mu.Lock()
	conns := t.conns
	t.conns = nil
	t.mu.Unlock()
	for c := range conns {
		c.Conn.Close()
	}
}

type trackedConn struct {
	net.Conn
	tracker *connTracker
}

func (c *trackedConn) Close() error {
	c.tracker.mu.Lock()
	delete(c.tracker.conns, c)
	c.tracker.mu.Unlock()
	return c.Conn.Close()
}

// authRoundTripper adds a Config's credentials and headers to requests.
type authRoundTripper struct {
	next               http.RoundTripper
	token              *tokenSource
	exec               *execAuth
	certs              *certSource
	username, password string
	impersonate        Impersonation
	userAgent          string
}

func (a *authRoundTripper) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", a.userAgent)
	}
	// As client-go, every impersonation field is sent as given: groups
	// without a user are the API server's to refuse, not to drop here
	// (the request would then run as the real, maybe mightier, user).
	im := a.impersonate
	if im.UserName != "" {
		req.Header.Set("Impersonate-User", im.UserName)
	}
	if im.UID != "" {
		req.Header.Set("Impersonate-Uid", im.UID)
	}
	for _, g := range im.Groups {
		req.Header.Add("Impersonate-Group", g)
	}
	for k, vs := range im.Extra {
		for _, v := range vs {
			req.Header.Add("Impersonate-Extra-"+headerKeyEscape(k), v)
		}
	}
	if a.certs != nil {
		a.certs.check()
	}
	if req.Header.Get("Authorization") == "" {
		switch token, err := a.token.get(); {
		case err != nil:
			closeBody(req)
			return nil, err
		case token != "":
			req.Header.Set("Authorization", "Bearer "+token)
		case a.exec != nil:
			token, err := a.exec.bearer()
			if err != nil {
				closeBody(req)
				return nil, err
			}
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
		case a.username != "" || a.password != "":
			req.SetBasicAuth(a.username, a.password)
		}
	}
	resp, err := a.next.RoundTrip(req)
	if err == nil && resp.StatusCode == http.StatusUnauthorized && a.exec != nil {
		// The plugin's credential was refused: the next request runs it
		// again, as client-go does (once for concurrent refusals).
		a.exec.forget(strings.TrimPrefix(req.Header.Get("Authorization"), "Bearer "))
	}
	return resp, err
}

// closeBody closes the body of a request that is not sent, as a
// RoundTripper must.
func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// headerKeyEscape escapes what a header name may not hold in an
// Impersonate-Extra- key, as client-go does: any byte but letters, digits
// and the token punctuation becomes %XX.
func headerKeyEscape(key string) string {
	var b strings.Builder
	for i := 0; i < len(key); i++ {
		c := key[i]
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || strings.IndexByte("!#$&'*+-.^_`|~", c) >= 0 {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// tokenSource is a bearer token, read again from its file (when it has
// one) once a minute, as client-go does for rotated service account
// tokens.
type tokenSource struct {
	file string

	mu     sync.Mutex
	token  string
	readAt time.Time
}

// newTokenSource returns the source of token, or of file's content when
// file is set (as in client-go, token is then used only while the file
// cannot be read); nil when both are empty.
func newTokenSource(token, file string) *tokenSource {
	if token == "" && file == "" {
		return nil
	}
	return &tokenSource{token: strings.TrimSpace(token), file: file}
}

// get returns the current token; a file that cannot be read again keeps
// the last token in use (the error only when there never was one).
func (ts *tokenSource) get() (string, error) {
	if ts == nil {
		return "", nil
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if ts.file == "" || (!ts.readAt.IsZero() && time.Since(ts.readAt) < tokenFileReload) {
		return ts.token, nil
	}
	data, err := os.ReadFile(ts.file)
	token := strings.TrimSpace(string(data))
	if err == nil && token == "" {
		err = fmt.Errorf("%s is empty", ts.file)
	}
	if err != nil {
		if ts.token != "" {
			return ts.token, nil
		}
		return "", fmt.Errorf("read bearer token file: %w", err)
	}
	ts.token, ts.readAt = token, time.Now()
	return ts.token, nil
}
