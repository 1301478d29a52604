package endpoints

import (
	"net/netip"
	"strings"
	"testing"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/store"
)

// TestOrphaned is the seed 001 rule: an endpoint is an orphan only when no
// pod with its UID exists in a list requested after the endpoint was
// created, and never while a pod of its name may be its own.
func TestOrphaned(t *testing.T) {
	addr := netip.MustParseAddr("10.244.0.7")
	ep := func(created uint64, ns, name, uid string) *store.Endpoint {
		return &store.Endpoint{
			Pod:       store.PodRef{Namespace: ns, Name: name, UID: uid},
			Addresses: []store.AddressRef{{Pool: "10.244.0.0/24", Addr: addr, Bits: 24}},
			Revisions: store.Revisions{CreateRevision: created, ModifyRevision: created},
		}
	}
	running := func(name, uid string, ips ...string) Pod {
		p := Pod{Namespace: "web", Name: name, UID: uid}
		for _, ip := range ips {
			p.IPs = append(p.IPs, netip.MustParseAddr(ip))
		}
		return p
	}
	tests := []struct {
		name string
		e    *store.Endpoint
		pods []Pod
		want bool
	}{
		{"its pod exists", ep(5, "web", "web-0", "uid-a"), []Pod{running("web-0", "uid-a", "10.244.0.7")}, false},
		{"its pod exists, Pending, no IP yet (whereabouts)", ep(5, "web", "web-0", "uid-a"),
			[]Pod{{Namespace: "web", Name: "web-0", UID: "uid-a", Pending: true}}, false},
		{"its pod is gone, nothing of its name", ep(5, "web", "web-0", "uid-a"), []Pod{running("web-1", "uid-b", "10.244.0.8")}, true},
		{"created after the list was requested", ep(11, "web", "web-0", "uid-a"), nil, false},
		{"created at the list's revision", ep(10, "web", "web-0", "uid-a"), nil, true},
		{"re-created under its name, Pending", ep(5, "web", "web-0", "uid-a"),
			[]Pod{{Namespace: "web", Name: "web-0", UID: "uid-new", Pending: true}}, false},
		{"re-created under its name, no network status yet", ep(5, "web", "web-0", "uid-a"),
			[]Pod{{Namespace: "web", Name: "web-0", UID: "uid-new"}}, false},
		{"a pod of its name reports its address (a static pod's mirror)", ep(5, "web", "web-0", "uid-a"),
			[]Pod{running("web-0", "uid-mirror", "10.244.0.7")}, false},
		{"re-created under its name, running elsewhere", ep(5, "web", "web-0", "uid-a"),
			[]Pod{running("web-0", "uid-new", "10.244.0.9")}, true},
		{"same name in another namespace does not protect", ep(5, "web", "web-0", "uid-a"),
			[]Pod{{Namespace: "other", Name: "web-0", UID: "uid-x", Pending: true}}, true},
		{"no UID: a pod of its name exists", ep(5, "web", "web-0", ""), []Pod{running("web-0", "uid-new", "10.244.0.9")}, false},
		{"no UID: nothing of its name", ep(5, "web", "web-0", ""), nil, true},
		{"no pod identity at all", ep(5, "", "", ""), nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Orphaned(PodList{Revision: 10, Pods: tc.pods})(tc.e); got != tc.want {
				t.Errorf("Orphaned = %v, want %v", got, tc.want)
			}
		})
	}
	if Orphaned(PodList{})(ep(1, "web", "web-0", "uid-a")) {
		t.Error("an empty PodList (revision 0) judged an endpoint")
	}
}

// TestGCAndOrphansShareTheReleasePath: both keep an ADD in flight, and
// both release an endpoint with all its addresses in one transaction.
func TestGCAndOrphansShareTheReleasePath(t *testing.T) {
	for _, verb := range []string{"gc", "orphans"} {
		t.Run(verb, func(t *testing.T) {
			f := newFixture(t, t.TempDir(), Config{}, "10.0.0.0/24", "fd00::/120")
			f.add(t, att(1))
			if _, err := f.svc.Add(ctx, api.AddRequest{Attachment: att(2), Netns: "/x", Pod: api.PodRef{Namespace: "ns", Name: "c002", UID: "uid-c002"}}); err != nil {
				t.Fatal(err)
			}
			var released []api.Endpoint
			switch verb {
			case "gc":
				resp, err := f.svc.GC(ctx, api.GCRequest{})
				if err != nil {
					t.Fatal(err)
				}
				released = resp.Released
			case "orphans":
				var err error
				released, err = f.svc.ReleaseOrphans(ctx, PodList{Revision: f.svc.Revision()})
				if err != nil {
					t.Fatal(err)
				}
			}
			if len(released) != 1 || released[0].ContainerID != "c001" || len(released[0].Addresses) != 2 {
				t.Fatalf("released %+v; want c001 with both its addresses, and the ADD in flight kept", released)
			}
			st, _ := f.svc.Status(ctx)
			for _, p := range st.Pools {
				if p.Used != 1 {
					t.Errorf("pool %s: %d used, want the in-flight ADD's 1", p.Name, p.Used)
				}
			}
		})
	}
}

// TestPoolsFromStore: in Kubernetes mode ADD allocates from the store's
// pools that are not draining, in address order, for the families the
// store has; the errors say what is missing.
func TestPoolsFromStore(t *testing.T) {
	type pool struct {
		cidr     string
		draining bool
	}
	tests := []struct {
		name    string
		pools   []pool
		want    []string // addresses of the first ADD
		wantErr string
	}{
		{"one block", []pool{{"10.244.0.64/26", false}}, []string{"10.244.0.65"}, ""},
		{"address order", []pool{{"10.244.0.64/26", false}, {"10.244.0.0/26", false}}, []string{"10.244.0.1"}, ""},
		{"draining block skipped", []pool{{"10.244.0.0/26", true}, {"10.244.0.64/26", false}}, []string{"10.244.0.65"}, ""},
		{"dual stack", []pool{{"10.244.0.0/26", false}, {"fd00::/120", false}}, []string{"10.244.0.1", "fd00::1"}, ""},
		{"IPv6 only", []pool{{"fd00::/120", false}}, []string{"fd00::1"}, ""},
		{"only block draining", []pool{{"10.244.0.0/26", true}}, nil, "draining, not allocated from: 10.244.0.0/26"},
		{"IPv6 block draining fails the dual-stack ADD", []pool{{"10.244.0.0/26", false}, {"fd00::/120", true}}, nil, "no IPv6 address block"},
		{"no block yet", nil, nil, "no IPv4 address block"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, t.TempDir(), Config{PoolsFromStore: true})
			txn := f.svc.store.WriteTxn()
			for _, p := range tc.pools {
				cidr := netip.MustParsePrefix(p.cidr)
				if err := store.UpsertPool(txn, store.Pool{Name: PoolName(cidr), CIDR: cidr, Draining: p.draining}); err != nil {
					t.Fatal(err)
				}
			}
			txn.Commit()
			resp, err := f.svc.Add(ctx, api.AddRequest{Attachment: att(1), Netns: "/x"})
			if tc.wantErr != "" {
				if api.CodeOf(err) != api.CodePoolExhausted || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want a pool-exhausted error saying %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, a := range resp.Addresses {
				got = append(got, a.Address.Addr().String())
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("addresses %v, want %v", got, tc.want)
			}
		})
	}
	if _, err := New(nil, nil, Config{PoolsFromStore: true, Pools: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}}); err == nil {
		t.Error("configured pools accepted in Kubernetes mode")
	}
}
