package probe

import (
	"fmt"

	"lockstep.dev/lockstep/agent/explain"
	"lockstep.dev/lockstep/agent/manifests"
	"lockstep.dev/lockstep/agent/policy"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
)

// SnapshotOf is what explain judges a report by: the objects of the
// manifests the agent enforced, each probed pod with the address it was
// probed at (the agent gave it; the manifests may not say).
func SnapshotOf(objs *manifests.Objects, rep *Report) *policy.Snapshot {
	ips := make(map[string]string, len(rep.Pods))
	for _, p := range rep.Pods {
		ips[p.Key()] = p.IP
	}
	snap := &policy.Snapshot{Namespaces: objs.NamespaceMap(), Policies: objs.Policies, Services: objs.Services}
	for _, p := range objs.Pods {
		if ip, ok := ips[p.Namespace+"/"+p.Name]; ok {
			c := *p
			c.Status.PodIP, c.Status.PodIPs = ip, nil
			p = &c
		}
		snap.Pods = append(snap.Pods, p)
	}
	return snap
}

// Explain fills each result by pod address with what explain says of
// it: Reason, and Explained (allow or deny), from snap (see SnapshotOf).
// A result explain disagrees with is a bug in one of them: ExplainedTable
// shows where.
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
	return nil
}

// ExplainedTable renders the pod blocks of the report as explain judged
// them (see Explain): a cell explain did not judge is '?'. Compared with
// Table by CompareTables, it lists the cells where explain and the
// packets disagree.
func (r *Report) ExplainedTable() Table {
	ex := &Report{Via: ViaPodIP, Pods: r.Pods}
	for _, res := range r.Results {
		var allowed *bool
		if res.Explained != "" {
			a := res.Explained == explain.Allow
			allowed = &a
		}
		ex.Results = append(ex.Results, Result{From: res.From, To: res.To, Port: res.Port, Protocol: res.Protocol, Allowed: allowed})
	}
	return ex.Table()
}
