//go:build windows

package hns

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/Microsoft/hcsshim/hcn"
)

// hcnClient is the Client of one HNS network, through hcsshim's hcn
// package (HNS v2 API).
//
// What hcn cannot tell it: HNS reports failures as HRESULTs that hcn does
// not classify beyond "not found", so a refused delete of a referenced set,
// a missing set and a transient failure all come back as plain errors here,
// never wrapped in ErrSetInUse, ErrSetNotFound or ErrTransient. The
// Dataplane does not depend on the distinction: after any error it reads
// HNS back and repairs on the next Apply.
type hcnClient struct {
	networkID string
}

// NewClient returns the Client of the HNS network named network (the
// network the CNI plugin creates pod endpoints in). It fails when this
// HNS lacks SetPolicy (HNS 13.0) or NESTEDIPSET (HNS 15.0) support.
func NewClient(network string) (Client, error) {
	if err := hcn.SetPolicySupported(); err != nil {
		return nil, fmt.Errorf("open hns network %s: set policies: %w", network, err)
	}
	if err := hcn.NestedIpSetSupported(); err != nil {
		return nil, fmt.Errorf("open hns network %s: nested ipsets: %w", network, err)
	}
	n, err := hcn.GetNetworkByName(network)
	if err != nil {
		return nil, fmt.Errorf("open hns network %s: %w", network, err)
	}
	return &hcnClient{networkID: n.Id}, nil
}

// SetPolicies lists lockstep's SetPolicies on the network.
func (c *hcnClient) SetPolicies() ([]SetPolicy, error) {
	n, err := hcn.GetNetworkByID(c.networkID)
	if err != nil {
		return nil, fmt.Errorf("get hns network %s: %w", c.networkID, err)
	}
	var out []SetPolicy
	for _, p := range n.Policies {
		if p.Type != hcn.SetPolicy {
			continue
		}
		var s hcn.SetPolicySetting
		if err := json.Unmarshal(p.Settings, &s); err != nil {
			return nil, fmt.Errorf("decode set policy of network %s: %w", c.networkID, err)
		}
		if !strings.HasPrefix(s.Id, IDPrefix) {
			continue
		}
		values := splitList(s.Values)
		slices.Sort(values)
		out = append(out, SetPolicy{ID: s.Id, Name: s.Name, Type: SetPolicyType(s.Type), Values: values})
	}
	return out, nil
}

// AddSetPolicies creates sets in one request.
func (c *hcnClient) AddSetPolicies(sets []SetPolicy) error {
	return c.modifySets(hcn.RequestTypeAdd, sets)
}

// UpdateSetPolicies replaces the values of sets in one request.
func (c *hcnClient) UpdateSetPolicies(sets []SetPolicy) error {
	return c.modifySets(hcn.RequestTypeUpdate, sets)
}

// DeleteSetPolicies deletes sets in one request.
func (c *hcnClient) DeleteSetPolicies(sets []SetPolicy) error {
	return c.modifySets(hcn.RequestTypeRemove, sets)
}

func (c *hcnClient) modifySets(op hcn.RequestType, sets []SetPolicy) error {
	req := hcn.PolicyNetworkRequest{Policies: make([]hcn.NetworkPolicy, len(sets))}
	for i, s := range sets {
		raw, err := json.Marshal(hcn.SetPolicySetting{
			Id: s.ID, Name: s.Name, Type: hcn.SetPolicyType(s.Type), Values: strings.Join(s.Values, ","),
		})
		if err != nil {
			return fmt.Errorf("encode set policy %s: %w", s.ID, err)
		}
		req.Policies[i] = hcn.NetworkPolicy{Type: hcn.SetPolicy, Settings: raw}
	}
	settings, err := json.Marshal(req)
	if err != nil {
		return fmt.Errorf("encode set policy request: %w", err)
	}
	n := &hcn.HostComputeNetwork{Id: c.networkID}
	err = n.ModifyNetworkSettings(&hcn.ModifyNetworkSettingRequest{
		ResourceType: hcn.NetworkResourceTypePolicy,
		RequestType:  op,
		Settings:     settings,
	})
	if err != nil {
		return fmt.Errorf("%s %d set policies on network %s: %w", strings.ToLower(string(op)), len(sets), c.networkID, err)
	}
	return nil
}

// Endpoint reports whether endpoint name exists.
func (c *hcnClient) Endpoint(name string) error {
	_, err := c.endpoint(name)
	return err
}

func (c *hcnClient) endpoint(name string) (*hcn.HostComputeEndpoint, error) {
	ep, err := hcn.GetEndpointByName(name)
	if hcn.IsNotFoundError(err) {
		return nil, fmt.Errorf("get hns endpoint %s: %w", name, ErrEndpointNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get hns endpoint %s: %w", name, err)
	}
	return ep, nil
}

// EndpointACLs returns lockstep's ACLs on every endpoint of the network.
func (c *hcnClient) EndpointACLs() (map[string][]ACL, error) {
	eps, err := hcn.ListEndpointsOfNetwork(c.networkID)
	if err != nil {
		return nil, fmt.Errorf("list endpoints of hns network %s: %w", c.networkID, err)
	}
	out := map[string][]ACL{}
	for _, ep := range eps {
		for _, p := range ep.Policies {
			a, ours, err := decodeACL(string(p.Type), p.Settings)
			if err != nil {
				return nil, fmt.Errorf("decode acl of hns endpoint %s: %w", ep.Name, err)
			}
			if ours {
				out[ep.Name] = append(out[ep.Name], a)
			}
		}
	}
	return out, nil
}

// SetEndpointACLs replaces lockstep's ACLs on endpoint name: it reads the
// endpoint's policies, keeps every one that is not a lockstep ACL, appends
// acls, and sends the list in one Update request (what Azure NPM does to
// remove ACLs, since HNS's Remove request matches policies unreliably).
func (c *hcnClient) SetEndpointACLs(name string, acls []ACL) error {
	ep, err := c.endpoint(name)
	if err != nil {
		return err
	}
	var req hcn.PolicyEndpointRequest
	for _, p := range ep.Policies {
		if _, ours, err := decodeACL(string(p.Type), p.Settings); err != nil || !ours {
			req.Policies = append(req.Policies, p)
		}
	}
	for _, a := range acls {
		raw, err := json.Marshal(encodeACL(a))
		if err != nil {
			return fmt.Errorf("encode acl %s: %w", a.ID, err)
		}
		req.Policies = append(req.Policies, hcn.EndpointPolicy{Type: hcn.ACL, Settings: raw})
	}
	if err := ep.ApplyPolicy(hcn.RequestTypeUpdate, req); err != nil {
		return fmt.Errorf("update acls of hns endpoint %s: %w", name, err)
	}
	return nil
}
