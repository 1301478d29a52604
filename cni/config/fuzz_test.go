package config

import (
	"errors"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// FuzzParseNetConf checks that no stdin makes ParseNetConf panic, that every
// accepted config satisfies Validate with its defaults filled in, and that
// every rejection is a code-7 CNI error.
func FuzzParseNetConf(f *testing.F) {
	for _, seed := range []string{
		`{"cniVersion":"1.1.0","name":"pods","type":"lockstep"}`,
		`{"cniVersion":"1.0.0","name":"pods","type":"lockstep","socket":"/run/ls.sock","mtu":9000}`,
		`{"cniVersion":"0.4.0","name":"pods","type":"lockstep","prevResult":{"interfaces":[{"name":"eth0"}],"ips":[{"version":"4","address":"10.0.0.2/24","interface":0}]}}`,
		`{"cniVersion":"1.1.0","name":"pods","type":"lockstep","cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"}]}`,
		`{"cniVersion":"1.1.0","name":"pods","type":"lockstep","mtu":70000}`,
		`{"cniVersion":"1.1.0","name":"pods","type":"lockstep","socket":"rel"}`,
		`{"cniVersion":"0.3.1","name":"n","type":"t","prevResult":{"ips":[{"version":"6","address":"fd00::2/64","gateway":"fd00::1"}],"routes":[{"dst":"::/0"}]}}`,
		`{}`, `null`, `[]`, ``, `{"mtu":-1}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, stdin []byte) {
		conf, err := ParseNetConf(stdin)
		if err != nil {
			var cniErr *types.Error
			if !errors.As(err, &cniErr) || cniErr.Code != types.ErrInvalidNetworkConfig {
				t.Fatalf("ParseNetConf(%q) error = %#v, want *types.Error code %d", stdin, err, types.ErrInvalidNetworkConfig)
			}
			return
		}
		if err := conf.Validate(); err != nil {
			t.Fatalf("ParseNetConf(%q) accepted a config that does not validate: %v", stdin, err)
		}
		if conf.RawPrevResult != nil {
			t.Fatalf("ParseNetConf(%q) left prevResult unparsed", stdin)
		}
	})
}

// FuzzParseArgs checks that no CNI_ARGS makes ParseArgs panic, that every
// accepted pod satisfies the DNS-1123 and UID rules, and that every
// rejection is a code-4 CNI error.
func FuzzParseArgs(f *testing.F) {
	for _, seed := range []string{
		"",
		"IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web-0;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=1f2e",
		"K8S_POD_NAME=a.b.c",
		"K8S_POD_NAME=a;K8S_POD_NAME=a",
		"K8S_POD_NAMESPACE=Upper",
		"=",
		";",
		"K8S_POD_UID=a b",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, args string) {
		pod, err := ParseArgs(args)
		if err != nil {
			var cniErr *types.Error
			if !errors.As(err, &cniErr) || cniErr.Code != types.ErrInvalidEnvironmentVariables {
				t.Fatalf("ParseArgs(%q) error = %#v, want *types.Error code %d", args, err, types.ErrInvalidEnvironmentVariables)
			}
			return
		}
		if err := ValidatePodRef(pod); err != nil {
			t.Fatalf("ParseArgs(%q) = %+v, which does not validate: %v", args, pod, err)
		}
		if args == "" && (pod.Namespace != "" || pod.Name != "" || pod.UID != "") {
			t.Fatalf("ParseArgs(\"\") = %+v, want an empty pod", pod)
		}
	})
}
