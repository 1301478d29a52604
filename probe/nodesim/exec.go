//go:build linux

package nodesim

import (
	"context"
	"os/exec"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/ns"
)

// Start starts cmd with its network namespace set to n. The child inherits
// the namespace of the thread that forks it, so it is forked from a thread
// locked inside n.
func Start(n ns.NetNS, cmd *exec.Cmd) error {
	return n.Do(func(ns.NetNS) error { return cmd.Start() })
}

// PluginExec runs CNI plugins inside a node namespace, as a container
// runtime on that node would. It satisfies libcni's invoke.Exec.
type PluginExec struct {
	Node ns.NetNS
	invoke.RawExec
}

// ExecPlugin runs the plugin binary inside the node namespace.
func (e *PluginExec) ExecPlugin(ctx context.Context, pluginPath string, stdin []byte, environ []string) ([]byte, error) {
	var out []byte
	err := e.Node.Do(func(ns.NetNS) error {
		var err error
		out, err = e.RawExec.ExecPlugin(ctx, pluginPath, stdin, environ)
		return err
	})
	return out, err
}

// Decode reads a plugin's VERSION answer.
func (e *PluginExec) Decode(jsonBytes []byte) (version.PluginInfo, error) {
	return (&version.PluginDecoder{}).Decode(jsonBytes)
}
