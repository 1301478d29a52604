package hns

import (
	"encoding/json"
	"reflect"
	"testing"

	"lockstep.dev/lockstep/agent/policy"
)

// TestACLCodec: an ACL survives encoding to HNS's JSON and back, with the
// remote sets in the field Azure NPM uses for the direction, and ACLs
// other agents own are left alone.
func TestACLCodec(t *testing.T) {
	for _, tc := range []struct {
		name string
		acl  ACL
		json string
	}{
		{"in, port range, nested set", ACL{ID: "lockstep-in-0", Direction: In, Action: Allow, Protocol: 6,
			LocalPorts: []policy.PortRange{{Lo: 80, Hi: 80}, {Lo: 1000, Hi: 2000}}, RemoteSets: []string{"lockstep-grp-1"}, Priority: 100},
			`{"Id":"lockstep-in-0","Protocols":"6","Action":"Allow","Direction":"In","LocalAddresses":"lockstep-grp-1","LocalPorts":"80,1000-2000","RuleType":"Switch","Priority":100}`},
		{"out, UDP port, one set", ACL{ID: "lockstep-out-1", Direction: Out, Action: Allow, Protocol: 17,
			RemotePorts: []policy.PortRange{{Lo: 53, Hi: 53}}, RemoteSets: []string{"lockstep-cidr-1"}, Priority: 100},
			`{"Id":"lockstep-out-1","Protocols":"17","Action":"Allow","Direction":"Out","RemoteAddresses":"lockstep-cidr-1","RemotePorts":"53","RuleType":"Switch","Priority":100}`},
		{"default block, any protocol and remote", ACL{ID: "lockstep-in-2", Direction: In, Action: Block, Priority: prioDefault},
			`{"Id":"lockstep-in-2","Action":"Block","Direction":"In","RuleType":"Switch","Priority":65000}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			raw, err := json.Marshal(encodeACL(tc.acl))
			if err != nil {
				t.Fatal(err)
			}
			if string(raw) != tc.json {
				t.Errorf("encoded\n %s\nwant\n %s", raw, tc.json)
			}
			got, ours, err := decodeACL(policyTypeACL, raw)
			if err != nil || !ours {
				t.Fatalf("decode: ours=%v err=%v", ours, err)
			}
			if !reflect.DeepEqual(got, tc.acl) {
				t.Errorf("round trip: got %+v, want %+v", got, tc.acl)
			}
		})
	}
	for _, other := range []struct{ typ, json string }{
		{policyTypeACL, `{"Id":"azure-acl-x-y","Action":"Allow","Direction":"In","Priority":222}`},
		{policyTypeACL, `{"Action":"Block","Direction":"Out"}`},
		{"OutBoundNAT", `{"Exceptions":["10.0.0.0/8"]}`},
	} {
		if _, ours, err := decodeACL(other.typ, json.RawMessage(other.json)); err != nil || ours {
			t.Errorf("%s %s: ours=%v err=%v, want another agent's policy", other.typ, other.json, ours, err)
		}
	}
	if _, _, err := decodeACL(policyTypeACL, json.RawMessage(`{"Id":"lockstep-in-0","LocalPorts":"90-80"}`)); err == nil {
		t.Error("decoded a reversed port range")
	}
}
