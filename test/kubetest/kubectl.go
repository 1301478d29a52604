//go:build linux

package kubetest

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// writeKubeconfig writes Kubeconfig: one cluster (Host, the CA inline so
// the file stands alone), one user (Token), one current context.
func (e *Env) writeKubeconfig() error {
	e.Kubeconfig = filepath.Join(e.Dir, "kubeconfig")
	return WriteKubeconfig(e.Kubeconfig, "kubetest", e.Host, e.caPEM, adminUser, e.Token)
}

// WriteKubeconfig writes a kubeconfig to path, readable by its owner only:
// one cluster called name at server (its CA inline, so the file stands
// alone), one user authenticating with a bearer token, one current
// context.
func WriteKubeconfig(path, name, server string, caPEM []byte, user, token string) error {
	const tmpl = `apiVersion: v1
kind: Config
clusters:
- name: %[1]s
  cluster:
    server: %[2]s
    certificate-authority-data: %[3]s
users:
- name: %[4]s
  user:
    token: %[5]s
contexts:
- name: %[1]s
  context:
    cluster: %[1]s
    user: %[4]s
current-context: %[1]s
`
	cfg := fmt.Sprintf(tmpl, name, server, base64.StdEncoding.EncodeToString(caPEM), user, token)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return fmt.Errorf("write kubeconfig %s: %w", path, err)
	}
	return nil
}

// KubectlCmd returns kubectl with args, pointed at the Env by KUBECONFIG
// and with its discovery cache in Dir rather than $HOME. Set Stdin (for
// `apply -f -`) or Stdout before running it.
func (e *Env) KubectlCmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, e.KubectlPath, args...)
	cmd.Env = append(os.Environ(),
		"KUBECONFIG="+e.Kubeconfig,
		"KUBECACHEDIR="+filepath.Join(e.Dir, "kubectl-cache"),
	)
	return cmd
}

// Kubectl runs kubectl with args and stdin (nil for none) and returns its
// standard output. A failure's error carries kubectl's standard error,
// which is where the server's answer is: "Error from server (Conflict):
// ...".
func (e *Env) Kubectl(ctx context.Context, stdin []byte, args ...string) ([]byte, error) {
	cmd := e.KubectlCmd(ctx, args...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("kubectl %s: %w: %s",
			strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}
