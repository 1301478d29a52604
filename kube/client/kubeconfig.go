package client

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"

	"lockstep.dev/lockstep/internal/yamljson"
)

// LoadConfig returns how a lockstep process reaches the API server: the
// kubeconfig file when one is named, the pod's service account otherwise.
func LoadConfig(kubeconfig string) (*Config, error) {
	if kubeconfig != "" {
		cfg, err := loadKubeconfig(kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("load --kubeconfig %s: %w", kubeconfig, err)
		}
		return cfg, nil
	}
	cfg, err := InClusterConfig()
	if err != nil {
		return nil, fmt.Errorf("load in-cluster API server config: %w (outside a pod, pass --kubeconfig)", err)
	}
	return cfg, nil
}

// loadKubeconfig reads the current context of the kubeconfig file at path
// into a Config, as client-go's clientcmd does for that one file (no
// KUBECONFIG merging, no overrides): the server and its TLS settings, and
// the user's credentials (token or token file, client certificate, basic
// auth, impersonation, exec credential plugin). Relative file names
// in the kubeconfig are relative to its directory.
//
// clientcmd itself is not used: lockstep is one binary, and its scheme of
// kubeconfig versions would initialise on every lockstep-cni start.
func loadKubeconfig(path string) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var kc kubeconfig
	if err := yamljson.UnmarshalTyped(data, &kc); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	if kc.CurrentContext == "" {
		return nil, errors.New("no current-context set; set one with kubectl config use-context")
	}
	var ctx *kubeconfigContext
	for i := range kc.Contexts {
		if kc.Contexts[i].Name == kc.CurrentContext {
			ctx = &kc.Contexts[i].Context
		}
	}
	if ctx == nil {
		return nil, fmt.Errorf("current-context %q is not among the file's contexts", kc.CurrentContext)
	}
	var cluster *kubeconfigCluster
	for i := range kc.Clusters {
		if kc.Clusters[i].Name == ctx.Cluster {
			cluster = &kc.Clusters[i].Cluster
		}
	}
	if cluster == nil || cluster.Server == "" {
		return nil, fmt.Errorf("cluster %q of context %q has no server", ctx.Cluster, kc.CurrentContext)
	}
	user := &kubeconfigUser{}
	if ctx.AuthInfo != "" {
		user = nil
		for i := range kc.AuthInfos {
			if kc.AuthInfos[i].Name == ctx.AuthInfo {
				user = &kc.AuthInfos[i].AuthInfo
			}
		}
		if user == nil {
			return nil, fmt.Errorf("user %q of context %q is not among the file's users", ctx.AuthInfo, kc.CurrentContext)
		}
	}
	base, err := filepath.Abs(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	return restConfig(cluster, user, base)
}

// restConfig turns a kubeconfig's cluster and user into a Config;
// relative file names are taken relative to base.
func restConfig(cluster *kubeconfigCluster, user *kubeconfigUser, base string) (*Config, error) {
	resolve := func(name string) string {
		if name == "" || filepath.IsAbs(name) {
			return name
		}
		return filepath.Join(base, name)
	}
	cfg := &Config{Host: cluster.Server, DisableCompression: cluster.DisableCompression}
	if u, err := url.ParseRequestURI(cfg.Host); err == nil && u.Opaque == "" && len(u.Path) > 1 {
		u.RawQuery, u.Fragment = "", ""
		cfg.Host = u.String()
	}
	if cluster.ProxyURL != "" {
		u, err := url.Parse(cluster.ProxyURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "socks5") {
			return nil, fmt.Errorf("proxy-url %q: want an http, https or socks5 URL", cluster.ProxyURL)
		}
		cfg.Proxy = http.ProxyURL(u)
	}
	if user.Impersonate != "" {
		cfg.Impersonate = Impersonation{
			UserName: user.Impersonate, UID: user.ImpersonateUID,
			Groups: user.ImpersonateGroups, Extra: user.ImpersonateUserExtra,
		}
	}
	// As with clientcmd, credentials and CAs are only for a TLS server:
	// an http:// server gets none.
	if !cfg.isTLS() {
		return cfg, nil
	}

	cfg.CAFile, cfg.CAData = resolve(cluster.CertificateAuthority), cluster.CertificateAuthorityData
	cfg.Insecure, cfg.ServerName = cluster.InsecureSkipTLSVerify, cluster.TLSServerName
	if cfg.CAFile != "" {
		if _, err := os.Stat(cfg.CAFile); err != nil {
			return nil, fmt.Errorf("read certificate-authority: %w", err)
		}
	}
	switch tokenFile := resolve(user.TokenFile); {
	case user.Token != "":
		cfg.BearerToken, cfg.BearerTokenFile = user.Token, tokenFile
	case tokenFile != "":
		token, err := os.ReadFile(tokenFile)
		if err != nil {
			return nil, fmt.Errorf("read tokenFile: %w", err)
		}
		cfg.BearerToken, cfg.BearerTokenFile = string(token), tokenFile
	}
	if user.ClientCertificate != "" || len(user.ClientCertificateData) > 0 {
		cfg.CertFile, cfg.CertData = resolve(user.ClientCertificate), user.ClientCertificateData
		cfg.KeyFile, cfg.KeyData = resolve(user.ClientKey), user.ClientKeyData
	}
	if user.Username != "" || user.Password != "" {
		cfg.Username, cfg.Password = user.Username, user.Password
	}
	if p := user.AuthProvider; p != nil {
		// client-go's auth-provider plugins register themselves when
		// imported, and lockstep imports none: with clientcmd too, the
		// client would fail to be built.
		return nil, fmt.Errorf("auth-provider %q is not supported; use an exec credential plugin, a token or a client certificate", p.Name)
	}
	if e := user.Exec; e != nil {
		cfg.ExecProvider = execConfig(e)
		// A command given as a path, rather than a name looked up in
		// PATH, is relative to the kubeconfig too.
		if strings.ContainsRune(e.Command, filepath.Separator) {
			cfg.ExecProvider.Command = resolve(e.Command)
		}
	}
	return cfg, nil
}

// execConfig converts a kubeconfig's exec credential plugin, with the
// defaults clientcmd gives it.
func execConfig(e *kubeconfigExec) *ExecConfig {
	out := &ExecConfig{
		Command: e.Command, Args: e.Args, APIVersion: e.APIVersion, InstallHint: e.InstallHint,
		ProvideClusterInfo: e.ProvideClusterInfo, InteractiveMode: e.InteractiveMode,
	}
	for _, v := range e.Env {
		out.Env = append(out.Env, ExecEnvVar(v))
	}
	if out.InteractiveMode == "" {
		switch out.APIVersion {
		case "client.authentication.k8s.io/v1beta1", "client.authentication.k8s.io/v1alpha1":
			out.InteractiveMode = "IfAvailable"
		}
	}
	return out
}

// kubeconfig is the part of a kubeconfig file (clientcmd's v1 Config)
// lockstep reads.
type kubeconfig struct {
	CurrentContext string `json:"current-context"`
	Contexts       []struct {
		Name    string            `json:"name"`
		Context kubeconfigContext `json:"context"`
	} `json:"contexts"`
	Clusters []struct {
		Name    string            `json:"name"`
		Cluster kubeconfigCluster `json:"cluster"`
	} `json:"clusters"`
	AuthInfos []struct {
		Name     string         `json:"name"`
		AuthInfo kubeconfigUser `json:"user"`
	} `json:"users"`
}

type kubeconfigContext struct {
	Cluster  string `json:"cluster"`
	AuthInfo string `json:"user"`
}

type kubeconfigCluster struct {
	Server                   string `json:"server"`
	TLSServerName            string `json:"tls-server-name,omitempty"`
	InsecureSkipTLSVerify    bool   `json:"insecure-skip-tls-verify,omitempty"`
	CertificateAuthority     string `json:"certificate-authority,omitempty"`
	CertificateAuthorityData []byte `json:"certificate-authority-data,omitempty"`
	ProxyURL                 string `json:"proxy-url,omitempty"`
	DisableCompression       bool   `json:"disable-compression,omitempty"`
}

type kubeconfigUser struct {
	ClientCertificate     string              `json:"client-certificate,omitempty"`
	ClientCertificateData []byte              `json:"client-certificate-data,omitempty"`
	ClientKey             string              `json:"client-key,omitempty"`
	ClientKeyData         []byte              `json:"client-key-data,omitempty"`
	Token                 string              `json:"token,omitempty"`
	TokenFile             string              `json:"tokenFile,omitempty"`
	Impersonate           string              `json:"as,omitempty"`
	ImpersonateUID        string              `json:"as-uid,omitempty"`
	ImpersonateGroups     []string            `json:"as-groups,omitempty"`
	ImpersonateUserExtra  map[string][]string `json:"as-user-extra,omitempty"`
	Username              string              `json:"username,omitempty"`
	Password              string              `json:"password,omitempty"`
	AuthProvider          *struct {
		Name string `json:"name"`
	} `json:"auth-provider,omitempty"`
	Exec *kubeconfigExec `json:"exec,omitempty"`
}

type kubeconfigExec struct {
	Command string   `json:"command"`
	Args    []string `json:"args"`
	Env     []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"env"`
	APIVersion         string `json:"apiVersion,omitempty"`
	InstallHint        string `json:"installHint,omitempty"`
	ProvideClusterInfo bool   `json:"provideClusterInfo"`
	InteractiveMode    string `json:"interactiveMode,omitempty"`
}
