package api

import "context"

// OpExplain asks the agent why a connection is allowed or denied, judged
// on one read transaction of its committed state (`lockstep explain`
// without --manifests). The answer's body is agent/explain's Result; this
// package leaves it raw so that the CNI plugin, which shares it, links no
// policy code.
const OpExplain = "explain"

// ExplainRequest names a connection as `lockstep explain` takes it:
// From and To are NAMESPACE/POD, an address or a CIDR, To also a Service
// (svc/NAMESPACE/NAME or its ClusterIP, Port then a Service port); Port is
// PORT or PORT/PROTO (tcp, udp or sctp; tcp when left out). Family (4 or 6, 0 for
// the pods' first address) picks the pod addresses ipBlocks are matched
// against.
type ExplainRequest struct {
	From   string `json:"from"`
	To     string `json:"to"`
	Port   string `json:"port"`
	Family int    `json:"family,omitempty"`
}

// Explain asks the agent to explain req and decodes its answer into out
// (an *explain.Result). A query the agent cannot parse, or that names a
// pod or Service it does not know, is answered CodeInvalidConfig with the
// reason.
func (c *Client) Explain(ctx context.Context, req ExplainRequest, out any) error {
	return c.call(ctx, OpExplain, req, out)
}
