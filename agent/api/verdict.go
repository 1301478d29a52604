package api

import (
	"bufio"
	"context"
	"encoding/json"
	"time"
)

// Verdict is one verdict event of the dataplane, by name: what the agent
// streams to a monitor (OpMonitor), one JSON line each.
//
// Endpoint is the pod the packet entered or left ("namespace/name"), or
// its host interface when no pod is known; Peer is the other end: a pod
// ("namespace/name"), "world" or, for an identity the agent no longer
// knows, "identity N". Rule says what decided it: a policy rule
// ("namespace/name ingress[0]", with Policy "namespace/name"), or
// "default deny" (the direction is isolated and no rule allows it),
// "not isolated" (no policy selects the pod in that direction),
// "anti-spoofing", "no endpoint", and the dataplane's other reasons.
type Verdict struct {
	Time     time.Time `json:"time"`
	Verdict  string    `json:"verdict"` // allow, drop or reject
	Reason   string    `json:"reason"`  // the dataplane's reason (bpfmaps.Reason)
	Dir      string    `json:"direction"`
	Endpoint string    `json:"endpoint"`
	Peer     string    `json:"peer"`
	Proto    string    `json:"proto"`
	Saddr    string    `json:"saddr"`
	Sport    uint16    `json:"sport"`
	Daddr    string    `json:"daddr"`
	Dport    uint16    `json:"dport"`
	Rule     string    `json:"rule"`
	Policy   string    `json:"policy,omitempty"`
	// Isolators are, for a default-deny drop, the policies
	// (namespace/name) that isolate Endpoint in Dir: none of their rules
	// allows the packet.
	Isolators []string `json:"isolators,omitempty"`
	// Count is how many events the line stands for (aggregation), 1 for
	// a single event.
	Count int `json:"count,omitempty"`
}

// MonitorRequest is the body of OpMonitor: the filters the agent applies
// before it sends a verdict (empty fields match everything).
type MonitorRequest struct {
	Pod       string `json:"pod,omitempty"`       // namespace/name, either end
	Namespace string `json:"namespace,omitempty"` // either end's
	Verdict   string `json:"verdict,omitempty"`   // allow, drop or reject
	Policy    string `json:"policy,omitempty"`    // namespace/name: its rule allowed, or it isolates a default-deny drop
}

// Monitor subscribes to verdict events on a connection of its own and
// calls fn with each until ctx ends (it returns nil then), fn returns an
// error, or the agent goes away. The agent turns event emission off when
// its last subscriber's connection closes, whatever closed it.
func (c *Client) Monitor(ctx context.Context, req MonitorRequest, fn func(Verdict) error) error {
	body, err := json.Marshal(req)
	if err != nil {
		return Errorf(CodeInternal, "encode %s request: %v", OpMonitor, err)
	}
	line, err := json.Marshal(Request{Version: Version, Op: OpMonitor, Body: body})
	if err != nil {
		return Errorf(CodeInternal, "encode %s request: %v", OpMonitor, err)
	}
	dctx, cancel := context.WithTimeout(ctx, c.timeout)
	conn, err := c.dial(dctx)
	cancel()
	if err != nil {
		return c.unreachable(err)
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := conn.Write(append(line, '\n')); err != nil {
		return c.unreachable(err)
	}
	r := bufio.NewReader(conn)
	raw, err := ReadLine(r, MaxLine)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return c.unreachable(err)
	}
	var resp Response
	if err := json.Unmarshal(raw, &resp); err != nil {
		return Errorf(CodeInternal, "decode agent's %s response: %v", OpMonitor, err)
	}
	if resp.Error != nil {
		return resp.Error
	}
	for {
		raw, err := ReadLine(r, MaxLine)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return Errorf(CodeTryAgainLater, "read verdicts from the agent: %v", err)
		}
		var v Verdict
		if err := json.Unmarshal(raw, &v); err != nil {
			return Errorf(CodeInternal, "decode agent's verdict: %v", err)
		}
		if err := fn(v); err != nil {
			return err
		}
	}
}
