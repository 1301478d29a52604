package hns

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"lockstep.dev/lockstep/agent/policy"
)

// HNS's names for an ACL endpoint policy and for ACLs the virtual switch
// (VFP) enforces (hcn.ACL, hcn.RuleTypeSwitch).
const (
	policyTypeACL  = "ACL"
	ruleTypeSwitch = "Switch"
)

// aclSetting is the JSON of an ACL endpoint policy: hcn.AclPolicySetting
// plus the Id HNS accepts and hcn does not declare; lockstep tells its ACLs
// apart by it. It lives outside the Windows-only client so its encoding is
// tested everywhere.
type aclSetting struct {
	Id              string `json:",omitempty"`
	Protocols       string `json:",omitempty"`
	Action          string
	Direction       string
	LocalAddresses  string `json:",omitempty"`
	RemoteAddresses string `json:",omitempty"`
	LocalPorts      string `json:",omitempty"`
	RemotePorts     string `json:",omitempty"`
	RuleType        string `json:",omitempty"`
	Priority        uint16 `json:",omitempty"`
}

// encodeACL renders a as HNS takes it. The remote sets go where Azure NPM
// puts its peer sets: LocalAddresses for In, RemoteAddresses for Out.
func encodeACL(a ACL) aclSetting {
	s := aclSetting{
		Id:          a.ID,
		Action:      string(a.Action),
		Direction:   string(a.Direction),
		LocalPorts:  formatPorts(a.LocalPorts),
		RemotePorts: formatPorts(a.RemotePorts),
		RuleType:    ruleTypeSwitch,
		Priority:    a.Priority,
	}
	if a.Protocol != ProtocolAny {
		s.Protocols = strconv.Itoa(int(a.Protocol))
	}
	if a.Direction == In {
		s.LocalAddresses = strings.Join(a.RemoteSets, ",")
	} else {
		s.RemoteAddresses = strings.Join(a.RemoteSets, ",")
	}
	return s
}

// decodeACL parses an endpoint policy of type typ with settings raw, if
// it is one of lockstep's ACLs.
func decodeACL(typ string, raw json.RawMessage) (ACL, bool, error) {
	if typ != policyTypeACL {
		return ACL{}, false, nil
	}
	var s aclSetting
	if err := json.Unmarshal(raw, &s); err != nil {
		return ACL{}, false, err
	}
	if !strings.HasPrefix(s.Id, IDPrefix) {
		return ACL{}, false, nil
	}
	a := ACL{ID: s.Id, Action: Action(s.Action), Direction: Direction(s.Direction), Priority: s.Priority}
	if s.Protocols != "" {
		n, err := strconv.ParseUint(s.Protocols, 10, 8)
		if err != nil {
			return ACL{}, false, fmt.Errorf("acl %s: protocols %q: %w", s.Id, s.Protocols, err)
		}
		a.Protocol = uint8(n)
	}
	var err error
	if a.LocalPorts, err = parsePorts(s.LocalPorts); err != nil {
		return ACL{}, false, fmt.Errorf("acl %s: %w", s.Id, err)
	}
	if a.RemotePorts, err = parsePorts(s.RemotePorts); err != nil {
		return ACL{}, false, fmt.Errorf("acl %s: %w", s.Id, err)
	}
	if a.Direction == In {
		a.RemoteSets = splitList(s.LocalAddresses)
	} else {
		a.RemoteSets = splitList(s.RemoteAddresses)
	}
	return a, true, nil
}

// formatPorts renders ranges as "80,1000-2000" (nil: "", any port).
func formatPorts(rs []policy.PortRange) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		if r.Lo == r.Hi {
			parts[i] = strconv.Itoa(int(r.Lo))
		} else {
			parts[i] = fmt.Sprintf("%d-%d", r.Lo, r.Hi)
		}
	}
	return strings.Join(parts, ",")
}

// parsePorts parses what formatPorts renders.
func parsePorts(s string) ([]policy.PortRange, error) {
	var out []policy.PortRange
	for _, part := range splitList(s) {
		lo, hi, isRange := strings.Cut(part, "-")
		if !isRange {
			hi = lo
		}
		l, err1 := strconv.ParseUint(lo, 10, 16)
		h, err2 := strconv.ParseUint(hi, 10, 16)
		if err1 != nil || err2 != nil || l > h {
			return nil, fmt.Errorf("ports %q: bad range %q", s, part)
		}
		out = append(out, policy.PortRange{Lo: uint16(l), Hi: uint16(h)})
	}
	return out, nil
}

// splitList splits one of HNS's comma-separated lists.
func splitList(s string) []string {
	if s == "" {
		return nil
	}
	parts := strings.Split(s, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}
