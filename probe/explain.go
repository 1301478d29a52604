package probe

import (
	"fmt"
	"net/netip"

	"lockstep.dev/lockstep/agent/explain"
	"lockstep.dev/lockstep/agent/manifests"
	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// SnapshotOf is what explain judges a report by: the objects of the
// manifests the agent enforced, each probed pod with the address it was
// probed at (the agent gave it; the manifests may not say), and the
// EndpointSlices the agent computes for the Services from those pods.
func SnapshotOf(objs *manifests.Objects, rep *Report) *policy.Snapshot {
	ips := make(map[string]netip.Addr, len(rep.Pods))
	for _, p := range rep.Pods {
		if a, err := netip.ParseAddr(p.IP); err == nil {
			ips[p.Key()] = a
		}
	}
	// The function never fails, nor then does ManifestSnapshot.
	snap, _ := explain.ManifestSnapshot(objs, func(p *policyapi.Pod) ([]netip.Addr, error) {
		if a, ok := ips[p.Namespace+"/"+p.Name]; ok {
			return []netip.Addr{a}, nil
		}
		return nil, nil
	})
	return snap
}

// Explain fills each result with what explain says of it: Reason, and
// Explained (allow or deny by pod address; through a Service, the outcome
// explain expects: allowed, denied, partial or refused), from snap (see
// SnapshotOf). A result through a Service is explained at the ClusterIP
// it was probed at. A result explain disagrees with is a bug in one of
// them: ExplainedTable shows where.
func (r *Report) Explain(snap *policy.Snapshot) error {
	for i := range r.Results {
		res := &r.Results[i]
		from, err := explain.ParseEndpoint(res.From)
		if err != nil {
			return err
		}
		to, err := explain.ParseEndpoint(res.To)
		if err != nil {
			return err
		}
		ans, err := explain.Explain(snap, explain.Query{From: from, To: to, Port: res.Port, Protocol: policyapi.Protocol(res.Protocol)})
		if err != nil {
			return fmt.Errorf("explain %s -> %s on %d/%s: %w", res.From, res.To, res.Port, res.Protocol, err)
		}
		res.Explained, res.Reason = ans.Verdict, ans.Reason
	}
	ips := make(map[string]string, len(r.Services))
	for _, s := range r.Services {
		ips[s.Key()] = s.IP
	}
	for i := range r.ServiceResults {
		res := &r.ServiceResults[i]
		from, err := explain.ParseEndpoint(res.From)
		if err != nil {
			return err
		}
		to, err := explain.ParseEndpoint(ips[res.Service])
		if err != nil {
			return fmt.Errorf("explain %s -> %s: %w", res.From, res.Service, err)
		}
		ans, err := explain.Explain(snap, explain.Query{From: from, To: to, Port: res.Port, Protocol: policyapi.Protocol(res.Protocol)})
		if err != nil {
			return fmt.Errorf("explain %s -> %s (%s) on %d/%s: %w", res.From, res.Service, ips[res.Service], res.Port, res.Protocol, err)
		}
		res.Explained, res.Reason = explainedOutcome(ans.Verdict), ans.Reason
	}
	return nil
}

// explainedOutcome is the outcome a Service's probe should find when
// explain's verdict is v.
func explainedOutcome(v string) Outcome {
	switch v {
	case explain.Allow:
		return OutcomeAllowed
	case explain.Deny:
		return OutcomeDenied
	case explain.Partial:
		return OutcomePartial
	case explain.Refused:
		return OutcomeRefused
	}
	return OutcomeUnprobeable
}

// ExplainedTable renders the report's blocks as explain judged them (see
// Explain): a cell explain did not judge is '?'. Compared with Table by
// CompareTables, it lists the cells where explain and the packets
// disagree.
func (r *Report) ExplainedTable() Table {
	ex := &Report{Via: r.Via, Pods: r.Pods, Services: r.Services}
	for _, res := range r.Results {
		var allowed *bool
		if res.Explained != "" {
			a := res.Explained == explain.Allow
			allowed = &a
		}
		ex.Results = append(ex.Results, Result{From: res.From, To: res.To, Port: res.Port, Protocol: res.Protocol, Allowed: allowed})
	}
	for _, res := range r.ServiceResults {
		ex.ServiceResults = append(ex.ServiceResults, ServiceResult{From: res.From, Service: res.Service, Port: res.Port, Protocol: res.Protocol, Outcome: res.Explained})
	}
	return ex.Table()
}
