package config

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"lockstep.dev/lockstep/agent/api"
)

// MTU bounds. DefaultMTU applies when the config leaves "mtu" out; MinMTU is
// the smallest MTU IPv4 allows and MaxMTU the largest a veth accepts.
const (
	DefaultMTU = 1500
	MinMTU     = 68
	MaxMTU     = 65535
)

// maxSocketPath is the longest path a unix socket address can hold
// (sun_path is 108 bytes including the terminating NUL).
const maxSocketPath = 107

// NetConf is the lockstep plugin's network configuration: the CNI fields
// every plugin receives plus lockstep's own keys.
type NetConf struct {
	types.NetConf

	// Socket is the absolute path of the agent's unix socket.
	Socket string `json:"socket,omitempty"`
	// MTU is the MTU of both ends of the pod's veth.
	MTU int `json:"mtu,omitempty"`
	// Attachments is "cni.dev/attachments", the spelling of the GC list
	// that libcni used before the specification's "cni.dev/valid-attachments"
	// (types.NetConf.ValidAttachments). GC reads both; see GCAttachments.
	Attachments []types.GCAttachment `json:"cni.dev/attachments,omitempty"`
}

// ParseNetConf decodes and validates the network configuration a runtime
// passes on stdin, filling in defaults (socket api.DefaultSocket, MTU
// DefaultMTU) and parsing "prevResult" when lockstep runs chained after
// another plugin. Every error is a *types.Error with code
// types.ErrInvalidNetworkConfig whose message names the key to fix.
func ParseNetConf(stdin []byte) (*NetConf, error) {
	trimmed := bytes.TrimSpace(stdin)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, invalidConfig("expected a JSON object on stdin")
	}
	conf := &NetConf{}
	if err := json.Unmarshal(trimmed, conf); err != nil {
		return nil, invalidConfig("decode JSON: %v", err)
	}
	if conf.Socket == "" {
		conf.Socket = api.DefaultSocket
	}
	if conf.MTU == 0 {
		conf.MTU = DefaultMTU
	}
	if err := conf.Validate(); err != nil {
		return nil, err
	}
	if err := version.ParsePrevResult(&conf.NetConf); err != nil {
		return nil, invalidConfig("\"prevResult\" does not match cniVersion %q: %v", conf.CNIVersion, err)
	}
	return conf, nil
}

// Validate checks the fields ParseNetConf checks, after defaults are
// applied. It returns a *types.Error with code types.ErrInvalidNetworkConfig.
func (c *NetConf) Validate() error {
	switch {
	case c.CNIVersion == "":
		return invalidConfig("\"cniVersion\" is missing; set it to the CNI version of the config list, e.g. \"1.1.0\"")
	case c.Name == "":
		return invalidConfig("\"name\" is missing; set it to the network name")
	case c.Type == "":
		return invalidConfig("\"type\" is missing; set it to the plugin binary name, e.g. \"lockstep\"")
	case c.Socket == "":
		return invalidConfig("\"socket\" is empty; leave it out to use %s", api.DefaultSocket)
	case !filepath.IsAbs(c.Socket):
		return invalidConfig("\"socket\" %q is not an absolute path", c.Socket)
	case len(c.Socket) > maxSocketPath:
		return invalidConfig("\"socket\" is %d bytes long; a unix socket path holds at most %d", len(c.Socket), maxSocketPath)
	case strings.IndexByte(c.Socket, 0) >= 0:
		return invalidConfig("\"socket\" %q contains a NUL byte", c.Socket)
	case c.MTU < MinMTU || c.MTU > MaxMTU:
		return invalidConfig("\"mtu\" %d out of range %d..%d", c.MTU, MinMTU, MaxMTU)
	}
	return nil
}

// GCAttachments returns the attachments a GC must keep: the union of
// "cni.dev/valid-attachments" and its older spelling "cni.dev/attachments".
// listed is false when stdin carried neither list (or only null); libcni
// omits both when called without GC arguments, meaning nothing is valid.
func (c *NetConf) GCAttachments() (valid []types.GCAttachment, listed bool) {
	seen := map[types.GCAttachment]bool{}
	for _, list := range [][]types.GCAttachment{c.ValidAttachments, c.Attachments} {
		for _, a := range list {
			if !seen[a] {
				seen[a] = true
				valid = append(valid, a)
			}
		}
	}
	return valid, c.ValidAttachments != nil || c.Attachments != nil
}

// MarshalJSON encodes the configuration with lockstep's keys and, when set,
// the parsed prevResult. Without it the embedded types.NetConf's method would
// be promoted and silently drop "socket" and "mtu".
func (c *NetConf) MarshalJSON() ([]byte, error) {
	base, err := json.Marshal(&c.NetConf)
	if err != nil {
		return nil, err
	}
	fields := map[string]json.RawMessage{}
	if err := json.Unmarshal(base, &fields); err != nil {
		return nil, err
	}
	if c.PrevResult != nil {
		prev, err := json.Marshal(c.PrevResult)
		if err != nil {
			return nil, fmt.Errorf("encode prevResult: %w", err)
		}
		fields["prevResult"] = prev
	}
	if c.Socket != "" {
		fields["socket"], _ = json.Marshal(c.Socket)
	}
	if c.MTU != 0 {
		fields["mtu"], _ = json.Marshal(c.MTU)
	}
	if c.Attachments != nil {
		fields["cni.dev/attachments"], _ = json.Marshal(c.Attachments)
	}
	return json.Marshal(fields)
}

func invalidConfig(format string, args ...any) *types.Error {
	return &types.Error{
		Code:    types.ErrInvalidNetworkConfig,
		Msg:     "invalid network config: " + fmt.Sprintf(format, args...),
		Details: "fix the lockstep entry of the CNI network config list on this node",
	}
}
