package plugin

import (
	"context"
	"io"
	"os"
	"strings"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/netsetup"
	"lockstep.dev/lockstep/internal/buildinfo"
)

// SupportedVersions are the CNI specification versions the plugin speaks,
// oldest first. Results are built as 1.1.0 and converted down; 0.3.0 is
// the oldest that can carry the interfaces a chained plugin such as portmap
// needs.
var SupportedVersions = []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"}

var supportedVersions = version.PluginSupports(SupportedVersions...)

// Main runs the plugin: it reads the CNI environment and stdin, performs
// the requested command and exits.
func Main() {
	p := newPlugin()
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    p.cmdAdd,
		Del:    p.cmdDel,
		Check:  p.cmdCheck,
		GC:     p.cmdGC,
		Status: p.cmdStatus,
	}, supportedVersions, about(os.Getenv("CNI_COMMAND")))
}

// about is what a bare invocation prints: "lockstep-cni VERSION (commit
// C, GOVERSION)". skel prints it only when CNI_COMMAND is unset, so for a
// command it is "" rather than the build information, which would be
// parsed from the binary on every pod ADD for nothing.
func about(command string) string {
	if command != "" {
		return ""
	}
	return "lockstep-cni " + strings.TrimPrefix(buildinfo.String(), "lockstep ")
}

// agentClient is the part of *api.Client the plugin uses; tests fake it.
type agentClient interface {
	CNIAdd(ctx context.Context, req api.CNIAddRequest, netns *os.File) (*api.CNIAddResponse, error)
	CNIDel(ctx context.Context, att api.Attachment) (*api.DelResponse, error)
	CNICheck(ctx context.Context, req api.CNICheckRequest, netns *os.File) (*api.CNICheckResponse, error)
	GC(ctx context.Context, req api.GCRequest) (*api.GCResponse, error)
	Status(ctx context.Context) (*api.StatusResponse, error)
}

// plugin holds the plugin's dependencies, so tests can replace the agent,
// the namespaces and the kernel.
type plugin struct {
	agent func(socket string) agentClient
	// openNetns opens CNI_NETNS for passing to the agent.
	openNetns func(path string) (*os.File, error)
	// teardown and hostLinks are GC's: it sweeps host links itself.
	teardown  func(hostIf string) error
	hostLinks func() ([]string, error)
	stdout    io.Writer
	stderr    io.Writer
}

// newPlugin returns a plugin wired to the real agent client and netsetup.
func newPlugin() *plugin {
	return &plugin{
		agent:     func(socket string) agentClient { return api.NewClient(socket, api.PluginTimeout) },
		openNetns: os.Open, // read-only, close-on-exec
		teardown:  netsetup.Teardown,
		hostLinks: netsetup.ListHostLinks,
		stdout:    os.Stdout,
		stderr:    os.Stderr,
	}
}

// The skel entry points. Each command runs to completion; the agent client
// bounds every call it makes, so no command can hang on a stuck agent.

func (p *plugin) cmdAdd(args *skel.CmdArgs) error    { return p.add(context.Background(), args) }
func (p *plugin) cmdDel(args *skel.CmdArgs) error    { return p.del(context.Background(), args) }
func (p *plugin) cmdCheck(args *skel.CmdArgs) error  { return p.checkCmd(context.Background(), args) }
func (p *plugin) cmdGC(args *skel.CmdArgs) error     { return p.gc(context.Background(), args) }
func (p *plugin) cmdStatus(args *skel.CmdArgs) error { return p.status(context.Background(), args) }
