package client

import (
	"fmt"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

// Client reaches lockstep.dev/v1alpha1 on one API server.
type Client struct {
	rest Interface
}

// scheme knows every API type lockstep talks to: lockstep.dev/v1alpha1 and
// the built-in core/v1, networking.k8s.io/v1, discovery.k8s.io/v1 and
// coordination.k8s.io/v1; REST decodes watch events and Result.Get by it.
// It is built on first use rather than taken from
// k8s.io/client-go/kubernetes/scheme, whose initialiser registers every API
// group of Kubernetes: lockstep is one binary, and the CNI plugin it also is
// pays for every package initialiser on each pod ADD
// (cmd/lockstep/deps_test.go).
var scheme = sync.OnceValue(func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		v1alpha1.AddToScheme, corev1.AddToScheme, networkingv1.AddToScheme, discoveryv1.AddToScheme, coordinationv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			// AddToScheme only registers types: failing is a programming
			// error.
			panic(fmt.Sprintf("register API types: %v", err))
		}
	}
	return s
})

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
