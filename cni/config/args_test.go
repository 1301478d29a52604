package config

import (
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"lockstep.dev/lockstep/agent/api"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name    string
		args    string
		want    api.PodRef
		wantErr string // substring of the message; "" means success
	}{
		{name: "empty", args: "", want: api.PodRef{}},
		{
			name: "kubelet",
			args: "IgnoreUnknown=1;K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=coredns-5d78c9869d-abcde;K8S_POD_INFRA_CONTAINER_ID=0123abcd;K8S_POD_UID=8e1a5a7c-2f1b-4b1e-9f0e-2f6c5d1a7b3c",
			want: api.PodRef{Namespace: "kube-system", Name: "coredns-5d78c9869d-abcde", UID: "8e1a5a7c-2f1b-4b1e-9f0e-2f6c5d1a7b3c"},
		},
		{name: "only unknown keys", args: "IgnoreUnknown=true;FOO=bar", want: api.PodRef{}},
		{name: "dotted pod name", args: "K8S_POD_NAME=web.v2.example", want: api.PodRef{Name: "web.v2.example"}},
		{name: "value with '='", args: "FOO=a=b;K8S_POD_UID=u=1", want: api.PodRef{UID: "u=1"}},
		{name: "63-character namespace", args: "K8S_POD_NAMESPACE=" + strings.Repeat("a", 63), want: api.PodRef{Namespace: strings.Repeat("a", 63)}},
		{name: "pair without '='", args: "K8S_POD_NAME", wantErr: `pair 1 "K8S_POD_NAME" has no '='`},
		{name: "trailing ';'", args: "K8S_POD_NAME=a;", wantErr: `pair 2 "" has no '='`},
		{name: "empty key", args: "=x", wantErr: "empty key"},
		{name: "duplicate key", args: "K8S_POD_NAME=a;K8S_POD_NAME=b", wantErr: `"K8S_POD_NAME" is given more than once`},
		{name: "duplicate unknown key", args: "FOO=a;FOO=a", wantErr: `"FOO" is given more than once`},
		{name: "upper-case namespace", args: "K8S_POD_NAMESPACE=Default", wantErr: `K8S_POD_NAMESPACE "Default" is not a DNS-1123 label`},
		{name: "empty namespace", args: "K8S_POD_NAMESPACE=", wantErr: "K8S_POD_NAMESPACE"},
		{name: "namespace with '.'", args: "K8S_POD_NAMESPACE=a.b", wantErr: "K8S_POD_NAMESPACE"},
		{name: "64-character namespace", args: "K8S_POD_NAMESPACE=" + strings.Repeat("a", 64), wantErr: "K8S_POD_NAMESPACE"},
		{name: "namespace ends with '-'", args: "K8S_POD_NAMESPACE=abc-", wantErr: "K8S_POD_NAMESPACE"},
		{name: "pod name with empty label", args: "K8S_POD_NAME=a..b", wantErr: "K8S_POD_NAME"},
		{name: "pod name starting with '-'", args: "K8S_POD_NAME=-a", wantErr: "K8S_POD_NAME"},
		{name: "254-character pod name", args: "K8S_POD_NAME=" + strings.Repeat("a", 254), wantErr: "K8S_POD_NAME"},
		{name: "empty uid", args: "K8S_POD_UID=", wantErr: "K8S_POD_UID"},
		{name: "uid with space", args: "K8S_POD_UID=a b", wantErr: "K8S_POD_UID"},
		{name: "uid too long", args: "K8S_POD_UID=" + strings.Repeat("u", 129), wantErr: "K8S_POD_UID"},
		{name: "uid with control byte", args: "K8S_POD_UID=a\x01", wantErr: "K8S_POD_UID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseArgs(tt.args)
			if tt.wantErr != "" {
				wantCNIError(t, err, types.ErrInvalidEnvironmentVariables, tt.wantErr)
				return
			}
			if err != nil {
				t.Fatalf("ParseArgs() error = %v", err)
			}
			if got != tt.want {
				t.Fatalf("ParseArgs() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestQuoteShortensLongValues(t *testing.T) {
	got := quote(strings.Repeat("x", 1000))
	if len(got) > 120 || !strings.Contains(got, "(1000 bytes)") {
		t.Fatalf("quote() = %q, want a short form naming the length", got)
	}
}
