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
	const tmpl = `apiVersion: v1
kind: Config
clusters:
- name: kubetest
  cluster:
    server: %s
    certificate-authority-data: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: kubetest
  context:
    cluster: kubetest
    user: %s
current-context: kubetest
`
	cfg := fmt.Sprintf(tmpl, e.Host, base64.StdEncoding.EncodeToString(e.caPEM), adminUser, e.Token, adminUser)
	e.Kubeconfig = filepath.Join(e.Dir, "kubeconfig")
	if err := os.WriteFile(e.Kubeconfig, []byte(cfg), 0o600); err != nil {
		return fmt.Errorf("write kubeconfig: %w", err)
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
