package config

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"lockstep.dev/lockstep/agent/api"
)

func TestParseNetConf(t *testing.T) {
	long := "/" + strings.Repeat("s", maxSocketPath)
	tests := []struct {
		name       string
		stdin      string
		wantErr    string // substring of the message; "" means success
		wantSocket string
		wantMTU    int
	}{
		{
			name:       "defaults",
			stdin:      `{"cniVersion":"1.1.0","name":"pods","type":"lockstep"}`,
			wantSocket: api.DefaultSocket,
			wantMTU:    DefaultMTU,
		},
		{
			name:       "explicit socket and mtu",
			stdin:      `{"cniVersion":"1.0.0","name":"pods","type":"lockstep","socket":"/var/run/ls.sock","mtu":9000}`,
			wantSocket: "/var/run/ls.sock",
			wantMTU:    9000,
		},
		{
			name:       "unknown keys are ignored",
			stdin:      `{"cniVersion":"1.1.0","name":"pods","type":"lockstep","runtimeConfig":{"portMappings":[]},"x":1}`,
			wantSocket: api.DefaultSocket,
			wantMTU:    DefaultMTU,
		},
		{
			name:       "mtu at the bounds",
			stdin:      `{"cniVersion":"1.1.0","name":"pods","type":"lockstep","mtu":68}`,
			wantSocket: api.DefaultSocket,
			wantMTU:    68,
		},
		{name: "empty stdin", stdin: ``, wantErr: "expected a JSON object"},
		{name: "null", stdin: `null`, wantErr: "expected a JSON object"},
		{name: "array", stdin: `[1]`, wantErr: "expected a JSON object"},
		{name: "truncated", stdin: `{"cniVersion":"1.1.0"`, wantErr: "decode JSON"},
		{name: "mtu is a string", stdin: `{"cniVersion":"1.1.0","name":"n","type":"t","mtu":"9000"}`, wantErr: "decode JSON"},
		{name: "missing cniVersion", stdin: `{"name":"n","type":"t"}`, wantErr: `"cniVersion" is missing`},
		{name: "missing name", stdin: `{"cniVersion":"1.1.0","type":"t"}`, wantErr: `"name" is missing`},
		{name: "missing type", stdin: `{"cniVersion":"1.1.0","name":"n"}`, wantErr: `"type" is missing`},
		{name: "relative socket", stdin: `{"cniVersion":"1.1.0","name":"n","type":"t","socket":"run/ls.sock"}`, wantErr: `"socket" "run/ls.sock" is not an absolute path`},
		{name: "socket too long", stdin: `{"cniVersion":"1.1.0","name":"n","type":"t","socket":"` + long + `"}`, wantErr: `a unix socket path holds at most 107`},
		{name: "mtu too large", stdin: `{"cniVersion":"1.1.0","name":"n","type":"t","mtu":70000}`, wantErr: `invalid network config: "mtu" 70000 out of range 68..65535`},
		{name: "mtu too small", stdin: `{"cniVersion":"1.1.0","name":"n","type":"t","mtu":67}`, wantErr: `"mtu" 67 out of range`},
		{name: "negative mtu", stdin: `{"cniVersion":"1.1.0","name":"n","type":"t","mtu":-1}`, wantErr: `"mtu" -1 out of range`},
		{name: "prevResult of an unknown version", stdin: `{"cniVersion":"9.9.9","name":"n","type":"t","prevResult":{"ips":[]}}`, wantErr: `"prevResult"`},
		{name: "prevResult malformed", stdin: `{"cniVersion":"1.0.0","name":"n","type":"t","prevResult":{"ips":[{"address":"nope"}]}}`, wantErr: `"prevResult"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conf, err := ParseNetConf([]byte(tt.stdin))
			if tt.wantErr != "" {
				wantCNIError(t, err, types.ErrInvalidNetworkConfig, tt.wantErr)
				return
			}
			if err != nil {
				t.Fatalf("ParseNetConf() error = %v", err)
			}
			if conf.Socket != tt.wantSocket || conf.MTU != tt.wantMTU {
				t.Fatalf("ParseNetConf() socket, mtu = %q, %d; want %q, %d", conf.Socket, conf.MTU, tt.wantSocket, tt.wantMTU)
			}
		})
	}
}

func TestParseNetConfPrevResult(t *testing.T) {
	stdin := `{
		"cniVersion": "1.0.0", "name": "pods", "type": "lockstep",
		"dns": {"nameservers": ["10.96.0.10"]},
		"prevResult": {
			"cniVersion": "1.0.0",
			"interfaces": [{"name": "eth0", "sandbox": "/run/netns/p"}],
			"ips": [{"address": "10.1.0.2/24", "interface": 0}]
		}
	}`
	conf, err := ParseNetConf([]byte(stdin))
	if err != nil {
		t.Fatalf("ParseNetConf() error = %v", err)
	}
	prev, err := types100.GetResult(conf.PrevResult)
	if err != nil {
		t.Fatalf("prevResult is not a 1.0.0 result: %v", err)
	}
	if len(prev.Interfaces) != 1 || len(prev.IPs) != 1 || prev.IPs[0].Address.String() != "10.1.0.2/24" {
		t.Fatalf("prevResult = %+v, want one interface and 10.1.0.2/24", prev)
	}
	if len(conf.DNS.Nameservers) != 1 {
		t.Fatalf("DNS = %+v, want one nameserver", conf.DNS)
	}
}

// TestNetConfMarshalRoundTrip proves MarshalJSON keeps lockstep's keys and
// the prevResult, which the promoted types.NetConf method would drop.
func TestNetConfMarshalRoundTrip(t *testing.T) {
	stdin := `{"cniVersion":"1.1.0","name":"pods","type":"lockstep","socket":"/run/x.sock","mtu":1400,
		"prevResult":{"cniVersion":"1.1.0","ips":[{"address":"10.1.0.2/24"}]}}`
	conf, err := ParseNetConf([]byte(stdin))
	if err != nil {
		t.Fatalf("ParseNetConf() error = %v", err)
	}
	out, err := json.Marshal(conf)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	again, err := ParseNetConf(out)
	if err != nil {
		t.Fatalf("ParseNetConf(%s) error = %v", out, err)
	}
	if again.Socket != "/run/x.sock" || again.MTU != 1400 || again.PrevResult == nil {
		t.Fatalf("round trip lost fields: %s", out)
	}
}

func TestNetConfGCAttachments(t *testing.T) {
	tests := []struct {
		name       string
		extra      string
		want       []types.GCAttachment
		wantListed bool
	}{
		{name: "neither key", extra: ``, wantListed: false},
		// null lists nothing, like a missing key: GC treats both as empty.
		{name: "valid-attachments null", extra: `,"cni.dev/valid-attachments":null`, wantListed: false},
		{name: "valid-attachments empty", extra: `,"cni.dev/valid-attachments":[]`, wantListed: true},
		{
			name:       "valid-attachments",
			extra:      `,"cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}]`,
			want:       []types.GCAttachment{{ContainerID: "a", IfName: "eth0"}},
			wantListed: true,
		},
		{
			name:       "older spelling only",
			extra:      `,"cni.dev/attachments":[{"containerID":"b","ifname":"eth0"}]`,
			want:       []types.GCAttachment{{ContainerID: "b", IfName: "eth0"}},
			wantListed: true,
		},
		{
			name:       "both spellings, as libcni sends them",
			extra:      `,"cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}],"cni.dev/attachments":[{"containerID":"a","ifname":"eth0"},{"containerID":"c","ifname":"net1"}]`,
			want:       []types.GCAttachment{{ContainerID: "a", IfName: "eth0"}, {ContainerID: "c", IfName: "net1"}},
			wantListed: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conf, err := ParseNetConf([]byte(`{"cniVersion":"1.1.0","name":"pods","type":"lockstep"` + tt.extra + `}`))
			if err != nil {
				t.Fatalf("ParseNetConf() error = %v", err)
			}
			got, listed := conf.GCAttachments()
			if listed != tt.wantListed || len(got) != len(tt.want) {
				t.Fatalf("GCAttachments() = %v, %v; want %v, %v", got, listed, tt.want, tt.wantListed)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("GCAttachments() = %v, want %v", got, tt.want)
				}
			}
		})
	}
}

// wantCNIError asserts err is a *types.Error with code and a message
// containing msg.
func wantCNIError(t *testing.T, err error, code uint, msg string) {
	t.Helper()
	var cniErr *types.Error
	if !errors.As(err, &cniErr) || cniErr.Code != code {
		t.Fatalf("error = %#v, want *types.Error with code %d", err, code)
	}
	if !strings.Contains(cniErr.Msg, msg) {
		t.Fatalf("message %q does not contain %q", cniErr.Msg, msg)
	}
}
