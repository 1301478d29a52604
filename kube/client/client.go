package client

import (
	"fmt"

	"lockstep.dev/lockstep/kube/api/schema"
	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

// Client reaches lockstep.dev/v1alpha1 on one API server.
type Client struct {
	rest Interface
}

// ForGroup returns a REST client for one group version on the API server
// cfg describes: core/v1, networking.k8s.io/v1, discovery.k8s.io/v1 or
// coordination.k8s.io/v1 (for lockstep.dev, use NewForConfig). Clients of
// equal Configs share their connections.
func ForGroup(cfg *Config, gv schema.GroupVersion) (Interface, error) {
	rc, err := newREST(cfg, gv)
	if err != nil {
		return nil, fmt.Errorf("create %s client for %s: %w", gv, cfg.Host, err)
	}
	return rc, nil
}

// NewForConfig returns a Client for the API server cfg describes, such as
// the one InClusterConfig returns inside a pod.
func NewForConfig(cfg *Config) (*Client, error) {
	rc, err := newREST(cfg, v1alpha1.SchemeGroupVersion)
	if err != nil {
		return nil, fmt.Errorf("create lockstep.dev client for %s: %w", cfg.Host, err)
	}
	return New(rc), nil
}

// New returns a Client on an existing REST client of lockstep.dev/v1alpha1.
func New(rc Interface) *Client {
	return &Client{rest: rc}
}

// RESTClient returns the underlying REST client.
func (c *Client) RESTClient() Interface {
	return c.rest
}

// IPPools returns the client for IPPool objects.
func (c *Client) IPPools() *Resource[*v1alpha1.IPPool, *v1alpha1.IPPoolList] {
	return &Resource[*v1alpha1.IPPool, *v1alpha1.IPPoolList]{
		client:   c.rest,
		resource: v1alpha1.IPPoolResource,
		kind:     "ippool",
		newObj:   func() *v1alpha1.IPPool { return new(v1alpha1.IPPool) },
		newList:  func() *v1alpha1.IPPoolList { return new(v1alpha1.IPPoolList) },
	}
}

// NodeIPAMs returns the client for NodeIPAM objects.
func (c *Client) NodeIPAMs() *Resource[*v1alpha1.NodeIPAM, *v1alpha1.NodeIPAMList] {
	return &Resource[*v1alpha1.NodeIPAM, *v1alpha1.NodeIPAMList]{
		client:   c.rest,
		resource: v1alpha1.NodeIPAMResource,
		kind:     "nodeipam",
		newObj:   func() *v1alpha1.NodeIPAM { return new(v1alpha1.NodeIPAM) },
		newList:  func() *v1alpha1.NodeIPAMList { return new(v1alpha1.NodeIPAMList) },
	}
}
