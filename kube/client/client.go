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
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"

	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

// Client reaches lockstep.dev/v1alpha1 on one API server.
type Client struct {
	rest rest.Interface
}

// codecs serialises every API group lockstep talks to: lockstep.dev/v1alpha1
// and the built-in core/v1, networking.k8s.io/v1, discovery.k8s.io/v1 and
// coordination.k8s.io/v1.
// It is built on first use rather than taken from
// k8s.io/client-go/kubernetes/scheme, whose initialiser registers every API
// group of Kubernetes: lockstep is one binary, and the CNI plugin it also is
// pays for every package initialiser on each pod ADD
// (cmd/lockstep/deps_test.go).
var codecs = sync.OnceValue(func() serializer.CodecFactory {
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
	return serializer.NewCodecFactory(s)
})

// ConfigFor returns a copy of cfg set up for lockstep.dev/v1alpha1 (see
// GroupConfig).
func ConfigFor(cfg *rest.Config) *rest.Config {
	return GroupConfig(cfg, v1alpha1.SchemeGroupVersion)
}

// GroupConfig returns a copy of cfg set up for the group version gv, one of
// those codecs registers: API path (/api for core, /apis otherwise), JSON
// and this package's codecs. Authentication, TLS, rate limits and timeouts
// are kept from cfg.
func GroupConfig(cfg *rest.Config, gv schema.GroupVersion) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	if gv.Group == "" {
		c.APIPath = "/api"
	}
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	c.NegotiatedSerializer = codecs().WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return c
}

// ForGroup returns a REST client for one group version on the API server
// cfg describes: core/v1, networking.k8s.io/v1 or coordination.k8s.io/v1
// (for lockstep.dev, use NewForConfig).
func ForGroup(cfg *rest.Config, gv schema.GroupVersion) (rest.Interface, error) {
	rc, err := rest.RESTClientFor(GroupConfig(cfg, gv))
	if err != nil {
		return nil, fmt.Errorf("create %s client for %s: %w", gv, cfg.Host, err)
	}
	return rc, nil
}

// NewForConfig returns a Client for the API server cfg describes, such as
// the one rest.InClusterConfig returns inside a pod.
func NewForConfig(cfg *rest.Config) (*Client, error) {
	rc, err := rest.RESTClientFor(ConfigFor(cfg))
	if err != nil {
		return nil, fmt.Errorf("create lockstep.dev client for %s: %w", cfg.Host, err)
	}
	return New(rc), nil
}

// New returns a Client on an existing REST client, which must be set up as
// ConfigFor sets it up.
func New(rc rest.Interface) *Client {
	return &Client{rest: rc}
}

// RESTClient returns the underlying REST client.
func (c *Client) RESTClient() rest.Interface {
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
