package client

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"

	"lockstep.dev/lockstep/internal/buildinfo"
)

// Config says how to reach one API server and who to be there: what
// LoadConfig reads from a kubeconfig file or a pod's service account. It
// holds what lockstep's processes use of client-go's rest.Config, and no
// more; ForGroup and NewForConfig turn it into clients.
type Config struct {
	// Host is the API server's URL (https://host:port, optionally with a
	// path prefix), or host:port for https.
	Host string

	// TLS: the certificate authority that signs the server's certificate
	// (a PEM file or its contents; the system's roots when both are
	// empty), whether to skip verifying it, and the name to verify it
	// against (the host's when empty).
	CAFile     string
	CAData     []byte
	Insecure   bool
	ServerName string
	// A client certificate and key, as files or PEM contents.
	CertFile, KeyFile string
	CertData, KeyData []byte

	// Credentials. BearerTokenFile, when set, is read again every minute
	// (kubelet rotates service account tokens), and its token wins over
	// BearerToken.
	BearerToken     string
	BearerTokenFile string
	Username        string
	Password        string
	// ExecProvider runs a credential plugin for a token or a client
	// certificate (see ExecConfig).
	ExecProvider *ExecConfig
	// Impersonate acts as another user, with the credentials above.
	Impersonate Impersonation

	// Proxy chooses a proxy for a request; nil means the environment's
	// (HTTPS_PROXY, NO_PROXY).
	Proxy func(*http.Request) (*url.URL, error)
	// DisableCompression turns off asking for gzip responses.
	DisableCompression bool
	// UserAgent is sent with every request; empty means DefaultUserAgent.
	UserAgent string
	// QPS and Burst limit requests per second on each client built from
	// the Config: 0 means client-go's defaults (5 and 10), a negative QPS
	// no limit. Watches count once, when they start.
	QPS   float32
	Burst int
	// WrapTransport, when set, wraps the round tripper of every client
	// built from the Config, for example to count requests: it sees each
	// request before the credentials are added, and its answer.
	WrapTransport func(http.RoundTripper) http.RoundTripper
}

// Wrap adds fn around the Config's round tripper, outside any wrapper set
// before.
func (cfg *Config) Wrap(fn func(http.RoundTripper) http.RoundTripper) {
	prev := cfg.WrapTransport
	if prev == nil {
		cfg.WrapTransport = fn
		return
	}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return fn(prev(rt)) }
}

// Impersonation is who a Config acts as (the Impersonate-* headers).
type Impersonation struct {
	UserName string
	UID      string
	Groups   []string
	Extra    map[string][]string
}

// ExecConfig is a kubeconfig user's credential plugin: a command whose
// output is an ExecCredential (client.authentication.k8s.io/v1 or
// v1beta1) holding a token or a client certificate and key, and until when
// they hold.
type ExecConfig struct {
	Command    string
	Args       []string
	Env        []ExecEnvVar
	APIVersion string
	// InstallHint is added to the error when Command cannot be run.
	InstallHint string
	// ProvideClusterInfo passes the server, its CA and TLS settings to the
	// plugin in KUBERNETES_EXEC_INFO.
	ProvideClusterInfo bool
	// InteractiveMode is Never, IfAvailable or Always. lockstep never runs
	// a plugin interactively (it has no terminal), so Always fails.
	InteractiveMode string
}

// ExecEnvVar is one environment variable given to a credential plugin.
type ExecEnvVar struct {
	Name  string
	Value string
}

// Client-go's defaults for Config.QPS and Config.Burst.
const (
	defaultQPS   = 5
	defaultBurst = 10
)

// DefaultUserAgent is "lockstep/VERSION (GOOS/GOARCH)", as the binary was
// built.
func DefaultUserAgent() string {
	return fmt.Sprintf("lockstep/%s (%s/%s)", buildinfo.Get().Version, runtime.GOOS, runtime.GOARCH)
}

// CopyConfig returns a copy of cfg whose slices and maps are its own.
func CopyConfig(cfg *Config) *Config {
	c := *cfg
	c.CAData, c.CertData, c.KeyData = cloneBytes(cfg.CAData), cloneBytes(cfg.CertData), cloneBytes(cfg.KeyData)
	c.Impersonate.Groups = append([]string(nil), cfg.Impersonate.Groups...)
	if cfg.Impersonate.Extra != nil {
		c.Impersonate.Extra = make(map[string][]string, len(cfg.Impersonate.Extra))
		for k, v := range cfg.Impersonate.Extra {
			c.Impersonate.Extra[k] = append([]string(nil), v...)
		}
	}
	if cfg.ExecProvider != nil {
		e := *cfg.ExecProvider
		e.Args = append([]string(nil), e.Args...)
		e.Env = append([]ExecEnvVar(nil), e.Env...)
		c.ExecProvider = &e
	}
	return &c
}

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte(nil), b...)
}

// The service account files kubelet mounts into every pod.
const (
	serviceAccountTokenFile = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	serviceAccountCAFile    = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
)

// ErrNotInCluster is InClusterConfig's error outside a pod.
var ErrNotInCluster = errors.New("unable to load in-cluster configuration, KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must be defined")

// InClusterConfig returns the Config of a pod's service account: the API
// server of the KUBERNETES_SERVICE_HOST and _PORT environment, its token
// (read again as kubelet rotates it) and the cluster's CA.
func InClusterConfig() (*Config, error) {
	host, port := os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT")
	if host == "" || port == "" {
		return nil, ErrNotInCluster
	}
	token, err := os.ReadFile(serviceAccountTokenFile)
	if err != nil {
		return nil, fmt.Errorf("read service account token: %w", err)
	}
	if _, err := os.Stat(serviceAccountCAFile); err != nil {
		return nil, fmt.Errorf("read service account CA: %w", err)
	}
	return &Config{
		Host:            "https://" + net.JoinHostPort(host, port),
		CAFile:          serviceAccountCAFile,
		BearerToken:     string(token),
		BearerTokenFile: serviceAccountTokenFile,
	}, nil
}

// isTLS reports whether cfg's server is reached over TLS: an https URL, or
// a host:port without a scheme.
func (cfg *Config) isTLS() bool {
	u, err := url.Parse(cfg.Host)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return true
	}
	return u.Scheme == "https"
}

// baseURL returns cfg.Host as a URL, https when it has no scheme.
func (cfg *Config) baseURL() (*url.URL, error) {
	if cfg.Host == "" {
		return nil, errors.New("no API server host configured")
	}
	u, err := url.Parse(cfg.Host)
	if err != nil || u.Scheme == "" || u.Host == "" {
		u, err = url.Parse("https://" + cfg.Host)
	}
	if err != nil {
		return nil, fmt.Errorf("parse API server host %q: %w", cfg.Host, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("API server host %q: want an http or https URL", cfg.Host)
	}
	u.RawQuery, u.Fragment = "", ""
	return u, nil
}
