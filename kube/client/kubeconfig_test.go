package client_test

import (
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"lockstep.dev/lockstep/kube/client"
)

// TestLoadConfigReadsKubeconfigsAsClientcmd loads kubeconfigs with every
// setting an agent or operator may be given, with LoadConfig and with
// client-go's clientcmd (which lockstep no longer links, see
// kube/client/doc.go), and wants the same settings from both: clientcmd's
// rest.Config, field by field, as a Config.
func TestLoadConfigReadsKubeconfigsAsClientcmd(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"ca.pem": "ca", "token": "file-token\n", "client.crt": "crt", "client.key": "key"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	const head = "apiVersion: v1\nkind: Config\ncurrent-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\n- name: other\n  context: {cluster: nope, user: nope}\n"
	tests := []struct {
		name    string
		cluster string // the cluster's fields, one per line
		user    string // the user's fields, one per line
	}{
		{"token and relative CA file, as the two-node tests write", "server: https://127.0.0.1:6443\ncertificate-authority: ca.pem", "token: abc"},
		{"inline CA and client certificate, as kubetest writes", "server: https://10.0.0.1\ncertificate-authority-data: " + b64("ca"),
			"client-certificate-data: " + b64("crt") + "\nclient-key-data: " + b64("key")},
		{"client certificate files and token file", "server: https://api.example:443\ncertificate-authority: " + filepath.Join(dir, "ca.pem"),
			"client-certificate: client.crt\nclient-key: client.key\ntokenFile: token"},
		{"token wins over token file", "server: https://api.example", "token: t\ntokenFile: token"},
		{"insecure with a server name", "server: https://api.example/\ninsecure-skip-tls-verify: true\ntls-server-name: kubernetes\ndisable-compression: true", "username: admin\npassword: secret"},
		{"server path keeps the path, drops the query", "server: https://api.example/prefix?x=1#f", "token: t"},
		{"impersonation", "server: https://api.example", "token: t\nas: jane\nas-uid: \"42\"\nas-groups: [devs]\nas-user-extra: {scopes: [view]}"},
		{"exec plugin", "server: https://api.example", "exec:\n    apiVersion: client.authentication.k8s.io/v1beta1\n    command: ./bin/get-token\n    args: [--x]\n    env: [{name: A, value: b}]\n    provideClusterInfo: true"},
		{"exec plugin found in PATH", "server: https://api.example", "exec:\n    apiVersion: client.authentication.k8s.io/v1\n    command: get-token\n    interactiveMode: Never"},
		{"plain http gets no credentials", "server: http://127.0.0.1:8080\ncertificate-authority: ca.pem", "token: abc"},
		{"proxy", "server: https://api.example\nproxy-url: http://proxy:3128", "token: t"},
		{"a YAML 1.1 boolean", "server: https://api.example\ninsecure-skip-tls-verify: yes", "token: t"},
		{"a key given twice takes the last", "server: https://api.example", "token: first\ntoken: second"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			indent := func(s string, n int) string {
				return strings.Repeat(" ", n) + strings.ReplaceAll(s, "\n", "\n"+strings.Repeat(" ", n))
			}
			kc := head + "clusters:\n- name: k\n  cluster:\n" + indent(tt.cluster, 4) + "\nusers:\n- name: u\n  user:\n" + indent(tt.user, 4) + "\n"
			path := filepath.Join(dir, "kubeconfig-"+string(rune('a'+i)))
			if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
				t.Fatal(err)
			}
			restCfg, err := clientcmd.BuildConfigFromFlags("", path)
			if err != nil {
				t.Fatalf("clientcmd refused the kubeconfig: %v\n%s", err, kc)
			}
			want := fromRESTConfig(restCfg)
			got, err := client.LoadConfig(path)
			if err != nil {
				t.Fatalf("LoadConfig: %v\n%s", err, kc)
			}
			gotProxy, wantProxy := proxyOf(t, got), proxyOf(t, want)
			got.Proxy, want.Proxy = nil, nil
			if gotProxy != wantProxy {
				t.Errorf("proxy %q, clientcmd's %q", gotProxy, wantProxy)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("LoadConfig gives\n%#v\nclientcmd gives\n%#v", got, want)
			}
		})
	}
}

// proxyOf returns the proxy cfg sends an API request through, or "".
func proxyOf(t *testing.T, cfg *client.Config) string {
	if cfg.Proxy == nil {
		return ""
	}
	req, _ := http.NewRequest(http.MethodGet, "https://api.example/api", nil)
	u, err := cfg.Proxy(req)
	if err != nil || u == nil {
		t.Fatalf("proxy: %v, %v", u, err)
	}
	return u.String()
}

// fromRESTConfig is what a Config holds of client-go's rest.Config.
func fromRESTConfig(c *rest.Config) *client.Config {
	out := &client.Config{
		Host: c.Host, CAFile: c.CAFile, CAData: c.CAData, Insecure: c.Insecure, ServerName: c.ServerName,
		CertFile: c.CertFile, KeyFile: c.KeyFile, CertData: c.CertData, KeyData: c.KeyData,
		BearerToken: c.BearerToken, BearerTokenFile: c.BearerTokenFile, Username: c.Username, Password: c.Password,
		Impersonate: client.Impersonation{UserName: c.Impersonate.UserName, UID: c.Impersonate.UID, Groups: c.Impersonate.Groups, Extra: c.Impersonate.Extra},
		Proxy:       c.Proxy, DisableCompression: c.DisableCompression, UserAgent: c.UserAgent, QPS: c.QPS, Burst: c.Burst,
	}
	if e := c.ExecProvider; e != nil {
		out.ExecProvider = &client.ExecConfig{Command: e.Command, Args: e.Args, APIVersion: e.APIVersion, InstallHint: e.InstallHint,
			ProvideClusterInfo: e.ProvideClusterInfo, InteractiveMode: string(e.InteractiveMode)}
		for _, v := range e.Env {
			out.ExecProvider.Env = append(out.ExecProvider.Env, client.ExecEnvVar{Name: v.Name, Value: v.Value})
		}
	}
	return out
}

// TestLoadConfigSaysWhatIsWrong checks that a kubeconfig lockstep cannot
// use is refused with the flag and the reason.
func TestLoadConfigSaysWhatIsWrong(t *testing.T) {
	dir := t.TempDir()
	tests := []struct{ name, kubeconfig, want string }{
		{"no current context", "apiVersion: v1\nkind: Config\n", "no current-context"},
		{"unknown current context", "current-context: x\n", `current-context "x" is not among`},
		{"cluster without server", "current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\nclusters: [{name: k, cluster: {}}]\n", `cluster "k" of context "c" has no server`},
		{"unknown user", "current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\nclusters: [{name: k, cluster: {server: https://a}}]\n", `user "u" of context "c"`},
		{"missing CA file", "current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\nclusters: [{name: k, cluster: {server: https://a, certificate-authority: nope.pem}}]\n", "certificate-authority"},
		{"auth provider plugin, which lockstep does not link", "current-context: c\ncontexts: [{name: c, context: {cluster: k, user: u}}]\nclusters: [{name: k, cluster: {server: https://a}}]\nusers: [{name: u, user: {auth-provider: {name: oidc}}}]\n", `auth-provider "oidc" is not supported`},
		{"not YAML", "{{", "parse"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-"))
			if err := os.WriteFile(path, []byte(tt.kubeconfig), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := client.LoadConfig(path)
			if err == nil || !strings.HasPrefix(err.Error(), "load --kubeconfig "+path+": ") || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one naming the flag and %q", err, tt.want)
			}
		})
	}
	if _, err := client.LoadConfig(filepath.Join(dir, "missing")); err == nil {
		t.Error("a missing kubeconfig loaded")
	}
}
