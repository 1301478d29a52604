package config

import (
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/types"

	"lockstep.dev/lockstep/agent/api"
)

// CNI_ARGS keys lockstep reads. Kubelet's runtimes send them for every pod;
// other keys, IgnoreUnknown and K8S_POD_INFRA_CONTAINER_ID among them, are
// accepted and ignored.
const (
	ArgPodNamespace = "K8S_POD_NAMESPACE"
	ArgPodName      = "K8S_POD_NAME"
	ArgPodUID       = "K8S_POD_UID"
)

// Limits on the pod identity taken from CNI_ARGS.
const (
	maxLabel     = 63  // DNS-1123 label, a namespace name
	maxSubdomain = 253 // DNS-1123 subdomain, a pod name
	maxUID       = 128
)

// ParseArgs parses CNI_ARGS ("K=V;K=V") into the pod it names. An empty
// string yields an empty PodRef: a plain container runtime names no pod.
// A malformed pair, a repeated key, or a pod field that Kubernetes would
// never produce fails with a *types.Error of code
// types.ErrInvalidEnvironmentVariables that names the offending key.
func ParseArgs(cniArgs string) (api.PodRef, error) {
	var pod api.PodRef
	if cniArgs == "" {
		return pod, nil
	}
	seen := map[string]bool{}
	for i, pair := range strings.Split(cniArgs, ";") {
		key, value, ok := strings.Cut(pair, "=")
		if !ok {
			return api.PodRef{}, invalidArgs("pair %d %s has no '='; expected KEY=VALUE pairs separated by ';'", i+1, quote(pair))
		}
		if key == "" {
			return api.PodRef{}, invalidArgs("pair %d %s has an empty key", i+1, quote(pair))
		}
		if seen[key] {
			return api.PodRef{}, invalidArgs("%s is given more than once", quote(key))
		}
		seen[key] = true
		switch key {
		case ArgPodNamespace:
			if !isDNS1123Label(value) {
				return api.PodRef{}, invalidArgs("%s %s is not a DNS-1123 label (lower-case alphanumerics and '-', at most %d characters)", key, quote(value), maxLabel)
			}
			pod.Namespace = value
		case ArgPodName:
			if !isDNS1123Subdomain(value) {
				return api.PodRef{}, invalidArgs("%s %s is not a DNS-1123 subdomain (lower-case alphanumerics, '-' and '.', at most %d characters)", key, quote(value), maxSubdomain)
			}
			pod.Name = value
		case ArgPodUID:
			if !isPodUID(value) {
				return api.PodRef{}, invalidArgs("%s %s is not a pod UID (1 to %d printable characters, no spaces or ';')", key, quote(value), maxUID)
			}
			pod.UID = value
		}
	}
	return pod, nil
}

// ValidatePodRef reports whether p could have come from ParseArgs: every
// field is empty or satisfies the rule ParseArgs enforces for its key.
func ValidatePodRef(p api.PodRef) error {
	switch {
	case p.Namespace != "" && !isDNS1123Label(p.Namespace):
		return invalidArgs("%s %s is not a DNS-1123 label", ArgPodNamespace, quote(p.Namespace))
	case p.Name != "" && !isDNS1123Subdomain(p.Name):
		return invalidArgs("%s %s is not a DNS-1123 subdomain", ArgPodName, quote(p.Name))
	case p.UID != "" && !isPodUID(p.UID):
		return invalidArgs("%s %s is not a pod UID", ArgPodUID, quote(p.UID))
	}
	return nil
}

// isDNS1123Label reports whether s is a DNS-1123 label as Kubernetes uses
// it for namespace names: 1 to 63 lower-case alphanumerics or '-', starting
// and ending with an alphanumeric.
func isDNS1123Label(s string) bool {
	return len(s) <= maxLabel && isLabel(s)
}

// isDNS1123Subdomain reports whether s is a DNS-1123 subdomain as Kubernetes
// uses it for pod names: at most 253 characters of labels joined by '.'.
// Like Kubernetes, it bounds only the whole name, not each label.
func isDNS1123Subdomain(s string) bool {
	if s == "" || len(s) > maxSubdomain {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if !isLabel(label) {
			return false
		}
	}
	return true
}

// isLabel checks the character rules of a DNS-1123 label, without a length
// bound.
func isLabel(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		switch {
		case alnum:
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

// isPodUID reports whether s can be a pod UID: 1 to 128 printable ASCII
// characters other than space and ';', which would break CNI_ARGS apart.
func isPodUID(s string) bool {
	if s == "" || len(s) > maxUID {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c <= ' ' || c > '~' || c == ';' {
			return false
		}
	}
	return true
}

// quote quotes s for an error message, shortening it so that a hostile
// CNI_ARGS cannot flood the runtime's log.
func quote(s string) string {
	const limit = 80
	if len(s) > limit {
		return fmt.Sprintf("%q... (%d bytes)", s[:limit], len(s))
	}
	return fmt.Sprintf("%q", s)
}

func invalidArgs(format string, args ...any) *types.Error {
	return &types.Error{
		Code:    types.ErrInvalidEnvironmentVariables,
		Msg:     "invalid CNI_ARGS: " + fmt.Sprintf(format, args...),
		Details: "the container runtime sets CNI_ARGS; check its pod sandbox configuration",
	}
}
