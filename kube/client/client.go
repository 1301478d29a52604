package client

import (
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/rest"

	"lockstep.dev/lockstep/kube/apis/v1alpha1"
)

// Client reaches lockstep.dev/v1alpha1 on one API server.
type Client struct {
	rest rest.Interface
}

// codecs serialises this package's types. It is built on first use.
var codecs = sync.OnceValue(func() serializer.CodecFactory {
	s := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(s); err != nil {
		// AddToScheme only registers types: failing is a programming error.
		panic(fmt.Sprintf("register lockstep.dev/v1alpha1: %v", err))
	}
	return serializer.NewCodecFactory(s)
})

// ConfigFor returns a copy of cfg set up for lockstep.dev/v1alpha1: API
// path, group version, JSON and this package's codecs. Authentication,
// TLS, rate limits and timeouts are kept from cfg.
func ConfigFor(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	gv := v1alpha1.SchemeGroupVersion
	c.GroupVersion = &gv
	c.APIPath = "/apis"
	c.ContentType = runtime.ContentTypeJSON
	c.AcceptContentTypes = runtime.ContentTypeJSON
	c.NegotiatedSerializer = codecs().WithoutConversion()
	if c.UserAgent == "" {
		c.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	return c
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
