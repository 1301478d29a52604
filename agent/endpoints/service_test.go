package endpoints

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-memdb"
	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/persist"
	policyapi "lockstep.dev/lockstep/agent/policy/api"
	"lockstep.dev/lockstep/agent/store"
)

var ctx = context.Background()

type fixture struct {
	dir  string
	db   *persist.DB
	disk *diskSwitch
	svc  *Service
}

// diskSwitch is the fixture store's Persister: the state file, or a fault
// a test puts in front of it.
type diskSwitch struct {
	mu sync.Mutex
	p  store.Persister
}

func (d *diskSwitch) Persist(changes memdb.Changes) (bool, error) {
	d.mu.Lock()
	p := d.p
	d.mu.Unlock()
	return p.Persist(changes)
}

func (d *diskSwitch) set(p store.Persister) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.p = p
}

func newFixture(t *testing.T, dir string, cfg Config, pools ...string) *fixture {
	t.Helper()
	for _, p := range pools {
		cfg.Pools = append(cfg.Pools, netip.MustParsePrefix(p))
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	db, err := persist.Open(dir, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	disk := &diskSwitch{p: db}
	st, _ := store.NewDurable(disk)
	svc, err := New(st, db, cfg)
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	f := &fixture{dir: dir, db: db, disk: disk, svc: svc}
	t.Cleanup(func() { db.Close() })
	return f
}

func att(i int) api.Attachment {
	return api.Attachment{ContainerID: fmt.Sprintf("c%03d", i), IfName: "eth0"}
}

// add runs a complete, confirmed ADD.
func (f *fixture) add(t *testing.T, a api.Attachment) *api.AddResponse {
	t.Helper()
	resp, err := f.svc.Add(ctx, api.AddRequest{Attachment: a, Netns: "/run/netns/x", Pod: api.PodRef{Namespace: "ns", Name: a.ContainerID, UID: "uid-" + a.ContainerID}})
	if err != nil {
		t.Fatalf("add %v: %v", a, err)
	}
	if err := f.svc.Confirm(ctx, api.OpRequest{Attachment: a, OpID: resp.OpID}); err != nil {
		t.Fatalf("confirm %v: %v", a, err)
	}
	return resp
}

func TestAddAllocatesPerFamily(t *testing.T) {
	tests := []struct {
		name  string
		pools []string
		want  []string
	}{
		{"ipv4 only", []string{"10.244.0.0/24"}, []string{"10.244.0.1/24"}},
		{"dual stack", []string{"10.244.0.0/24", "fd00:10:244::/120"}, []string{"10.244.0.1/24", "fd00:10:244::1/120"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, t.TempDir(), Config{}, tc.pools...)
			resp := f.add(t, att(1))
			var got []string
			for _, a := range resp.Addresses {
				got = append(got, a.Address.String())
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("addresses %v, want %v", got, tc.want)
			}
			if resp.HostIfName != api.HostIfName("c001", "eth0") {
				t.Fatalf("host ifname %q", resp.HostIfName)
			}
			ep, err := f.svc.Get(ctx, att(1))
			if err != nil || ep.State != "ready" || ep.Pod.UID != "uid-c001" {
				t.Fatalf("get: %+v %v", ep, err)
			}
		})
	}
}

func TestExhaustionNamesThePool(t *testing.T) {
	f := newFixture(t, t.TempDir(), Config{}, "10.0.0.0/30") // two usable
	f.add(t, att(1))
	f.add(t, att(2))
	_, err := f.svc.Add(ctx, api.AddRequest{Attachment: att(3), Netns: "/x"})
	if api.CodeOf(err) != api.CodePoolExhausted || !strings.Contains(err.Error(), "10.0.0.0/30") {
		t.Fatalf("got %v", err)
	}
	st, _ := f.svc.Status(ctx)
	if st.Pools[0].Free != 0 || st.Pools[0].Used != 2 {
		t.Fatalf("status %+v", st.Pools)
	}
	// Freeing one makes exactly that one available again.
	if _, err := f.svc.Del(ctx, att(1)); err != nil {
		t.Fatal(err)
	}
	if got := f.add(t, att(3)).Addresses[0].Address.Addr(); got != netip.MustParseAddr("10.0.0.1") {
		t.Fatalf("reused %s", got)
	}
}

func TestFreedAddressIsNotReusedAtOnce(t *testing.T) {
	f := newFixture(t, t.TempDir(), Config{}, "10.0.0.0/24")
	first := f.add(t, att(1)).Addresses[0].Address.Addr()
	if _, err := f.svc.Del(ctx, att(1)); err != nil {
		t.Fatal(err)
	}
	if got := f.add(t, att(2)).Addresses[0].Address.Addr(); got == first {
		t.Fatalf("freed %s handed out again immediately", got)
	}
}

func TestDelIsIdempotent(t *testing.T) {
	f := newFixture(t, t.TempDir(), Config{}, "10.0.0.0/24")
	f.add(t, att(1))
	for i, wantFound := range []bool{true, false, false} {
		resp, err := f.svc.Del(ctx, att(1))
		if err != nil || resp.Found != wantFound {
			t.Fatalf("DEL #%d: %+v %v", i+1, resp, err)
		}
	}
	if _, err := f.svc.Get(ctx, att(1)); api.CodeOf(err) != api.CodeUnknownContainer {
		t.Fatalf("get after DEL: %v", err)
	}
}

func TestRestoreFromDisk(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, dir, Config{}, "10.0.0.0/24", "fd00::/120")
	held := map[netip.Addr]bool{}
	for i := range 5 {
		for _, a := range f.add(t, att(i)).Addresses {
			held[a.Address.Addr()] = true
		}
	}
	if _, err := f.svc.Del(ctx, att(2)); err != nil {
		t.Fatal(err)
	}
	f.db.Close()

	g := newFixture(t, dir, Config{}, "10.0.0.0/24", "fd00::/120")
	st, _ := g.svc.Status(ctx)
	for _, p := range st.Pools {
		if p.Used != 4 {
			t.Fatalf("pool %s restored with %d used, want 4", p.Name, p.Used)
		}
	}
	// Restored endpoints confirm under their old operation, and new ADDs
	// never collide with them.
	ep, _ := g.svc.Get(ctx, att(0))
	if err := g.svc.Confirm(ctx, api.OpRequest{Attachment: att(0), OpID: ep.OpID}); err != nil {
		t.Fatalf("confirm restored: %v", err)
	}
	for i := 10; i < 20; i++ {
		for _, a := range g.add(t, att(i)).Addresses {
			if held[a.Address.Addr()] && a.Address.Addr() != netip.MustParseAddr("10.0.0.3") && a.Address.Addr() != netip.MustParseAddr("fd00::3") {
				t.Fatalf("%s handed out again after restore", a.Address)
			}
		}
	}
}

func TestReconfiguredPoolKeepsRestoredAddresses(t *testing.T) {
	dir := t.TempDir()
	f := newFixture(t, dir, Config{}, "10.0.0.0/30")
	f.add(t, att(1))
	f.add(t, att(2)) // 10.0.0.1, 10.0.0.2
	f.db.Close()

	// The operator widens the pool: the old one drains, and its addresses,
	// though inside the new pool, are not handed out again.
	g := newFixture(t, dir, Config{}, "10.0.0.0/29")
	st, _ := g.svc.Status(ctx)
	if len(st.Pools) != 2 || !st.Pools[0].Draining && !st.Pools[1].Draining {
		t.Fatalf("pools after reconfigure: %+v", st.Pools)
	}
	for i := 3; i < 7; i++ {
		a := g.add(t, att(i)).Addresses[0]
		if a.Address.Addr() == netip.MustParseAddr("10.0.0.1") || a.Address.Addr() == netip.MustParseAddr("10.0.0.2") {
			t.Fatalf("restored address %s handed out again from %s", a.Address, a.Pool)
		}
	}
	if _, err := g.svc.Del(ctx, att(1)); err != nil {
		t.Fatal(err)
	}
}

func TestDelDuringAddWins(t *testing.T) {
	f := newFixture(t, t.TempDir(), Config{DelWait: 5 * time.Second}, "10.0.0.0/30")
	resp, err := f.svc.Add(ctx, api.AddRequest{Attachment: att(1), Netns: "/x"})
	if err != nil {
		t.Fatal(err)
	}
	delDone := make(chan *api.DelResponse)
	go func() {
		r, err := f.svc.Del(ctx, att(1))
		if err != nil {
			t.Error(err)
		}
		delDone <- r
	}()
	// Wait until the DEL has marked the ADD cancelled, as a slow plugin
	// would only reach Confirm after that.
	for deadline := time.Now().Add(2 * time.Second); ; {
		ep, _ := f.svc.Get(ctx, att(1))
		if ep != nil && ep.State == "cancelled" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("DEL never marked the ADD cancelled")
		}
		time.Sleep(time.Millisecond)
	}
	err = f.svc.Confirm(ctx, api.OpRequest{Attachment: att(1), OpID: resp.OpID})
	if api.CodeOf(err) != api.CodeCancelled {
		t.Fatalf("confirm after DEL: %v", err)
	}
	select {
	case <-delDone:
		t.Fatal("DEL returned before the ADD rolled back")
	case <-time.After(50 * time.Millisecond):
	}
	if err := f.svc.Abort(ctx, api.OpRequest{Attachment: att(1), OpID: resp.OpID}); err != nil {
		t.Fatal(err)
	}
	if r := <-delDone; !r.Found {
		t.Fatal("DEL did not report the rolled-back endpoint")
	}
	st, _ := f.svc.Status(ctx)
	if st.Pools[0].Used != 0 {
		t.Fatalf("%d addresses leaked", st.Pools[0].Used)
	}
}

func TestDelDoesNotWaitForeverOnDeadAdd(t *testing.T) {
	f := newFixture(t, t.TempDir(), Config{DelWait: 100 * time.Millisecond}, "10.0.0.0/30")
	if _, err := f.svc.Add(ctx, api.AddRequest{Attachment: att(1), Netns: "/x"}); err != nil {
		t.Fatal(err)
	}
	// The plugin process died: nobody confirms or aborts.
	r, err := f.svc.Del(ctx, att(1))
	if err != nil || !r.Found {
		t.Fatalf("DEL: %+v %v", r, err)
	}
	if st, _ := f.svc.Status(ctx); st.Pools[0].Used != 0 {
		t.Fatal("address leaked")
	}
}

func TestConcurrentAddIsBusy(t *testing.T) {
	f := newFixture(t, t.TempDir(), Config{}, "10.0.0.0/24")
	if _, err := f.svc.Add(ctx, api.AddRequest{Attachment: att(1), Netns: "/x"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.svc.Add(ctx, api.AddRequest{Attachment: att(1), Netns: "/x"}); api.CodeOf(err) != api.CodeBusy {
		t.Fatalf("second ADD in flight: %v", err)
	}
}

func TestRepeatedAddKeepsAddresses(t *testing.T) {
	f := newFixture(t, t.TempDir(), Config{}, "10.0.0.0/24")
	first := f.add(t, att(1))
	second := f.add(t, att(1))
	if first.Addresses[0] != second.Addresses[0] || first.OpID == second.OpID {
		t.Fatalf("repeated ADD: %+v then %+v", first, second)
	}
	// The first ADD's late confirm is stale.
	if err := f.svc.Confirm(ctx, api.OpRequest{Attachment: att(1), OpID: first.OpID}); api.CodeOf(err) != api.CodeCancelled {
		t.Fatalf("stale confirm: %v", err)
	}
}

func TestGC(t *testing.T) {
	f := newFixture(t, t.TempDir(), Config{}, "10.0.0.0/24")
	for i := range 4 {
		f.add(t, att(i))
	}
	// An ADD in flight is not collected even though the runtime does not
	// list it yet.
	if _, err := f.svc.Add(ctx, api.AddRequest{Attachment: att(9), Netns: "/x"}); err != nil {
		t.Fatal(err)
	}
	resp, err := f.svc.GC(ctx, api.GCRequest{Valid: []api.Attachment{att(0), att(2)}})
	if err != nil {
		t.Fatal(err)
	}
	var released []string
	for _, e := range resp.Released {
		released = append(released, e.ContainerID)
	}
	if strings.Join(released, ",") != "c001,c003" {
		t.Fatalf("released %v, want c001,c003", released)
	}
	retained := strings.Join(resp.Retained, ",")
	for _, kept := range []int{0, 2, 9} {
		if !strings.Contains(retained, api.HostIfName(att(kept).ContainerID, "eth0")) {
			t.Errorf("GC did not report %s as retained: %v", att(kept).ContainerID, resp.Retained)
		}
	}
	if st, _ := f.svc.Status(ctx); st.Pools[0].Used != 3 {
		t.Fatalf("used %d after GC, want 3", st.Pools[0].Used)
	}
}

func TestInvalidInput(t *testing.T) {
	f := newFixture(t, t.TempDir(), Config{}, "10.0.0.0/24")
	tests := []struct {
		name string
		req  api.AddRequest
		code uint
	}{
		{"no container id", api.AddRequest{Attachment: api.Attachment{IfName: "eth0"}, Netns: "/x"}, api.CodeInvalidEnv},
		{"long ifname", api.AddRequest{Attachment: api.Attachment{ContainerID: "c", IfName: "abcdefghijklmnop"}, Netns: "/x"}, api.CodeInvalidEnv},
		{"slash in ifname", api.AddRequest{Attachment: api.Attachment{ContainerID: "c", IfName: "a/b"}, Netns: "/x"}, api.CodeInvalidEnv},
		{"no netns", api.AddRequest{Attachment: att(1)}, api.CodeInvalidEnv},
	}
	for _, tc := range tests {
		if _, err := f.svc.Add(ctx, tc.req); api.CodeOf(err) != tc.code {
			t.Errorf("%s: got %v, want code %d", tc.name, err, tc.code)
		}
	}
}

func TestPoolConfigErrors(t *testing.T) {
	tests := []struct {
		pools []string
		want  string
	}{
		{[]string{"fd00::/120"}, "at least one IPv4 pool"},
		{[]string{"10.0.0.1/24"}, "host bits"},
		{[]string{"10.0.0.0/24", "10.0.0.0/16"}, "overlaps"},
	}
	for _, tc := range tests {
		var cfg Config
		for _, p := range tc.pools {
			cfg.Pools = append(cfg.Pools, netip.MustParsePrefix(p))
		}
		db, _ := persist.Open(t.TempDir(), time.Second)
		st, _ := store.NewDurable(db)
		_, err := New(st, db, cfg)
		db.Close()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: got %v, want %q", tc.pools, err, tc.want)
		}
	}
}

func TestParsePins(t *testing.T) {
	tests := []struct {
		value   string
		v4, v6  string
		wantErr string
	}{
		{value: "10.244.1.5", v4: "10.244.1.5"},
		{value: " fd00::5 ", v6: "fd00::5"},
		{value: "10.244.1.5,fd00::5", v4: "10.244.1.5", v6: "fd00::5"},
		{value: "fd00::5, 10.244.1.5", v4: "10.244.1.5", v6: "fd00::5"},
		{value: "::ffff:10.244.1.5", v4: "10.244.1.5"},
		{value: "", wantErr: `"" is not an IP address`},
		{value: "10.244.1.5,", wantErr: `"" is not an IP address`},
		{value: "10.244.1.5/24", wantErr: "is not an IP address"},
		{value: "fe80::1%eth0", wantErr: "is not an IP address"},
		{value: "10.244.1.5,10.244.1.6", wantErr: "two addresses of one family"},
		{value: "10.0.0.1,fd00::1,fd00::2", wantErr: "want one address, or an IPv4 and an IPv6 address"},
	}
	for _, tc := range tests {
		t.Run(tc.value, func(t *testing.T) {
			got, err := ParsePins(tc.value)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ParsePins(%q) = %v, %v; want an error containing %q", tc.value, got, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParsePins(%q): %v", tc.value, err)
			}
			want := [2]netip.Addr{}
			if tc.v4 != "" {
				want[0] = netip.MustParseAddr(tc.v4)
			}
			if tc.v6 != "" {
				want[1] = netip.MustParseAddr(tc.v6)
			}
			if got != want {
				t.Errorf("ParsePins(%q) = %v, want %v", tc.value, got, want)
			}
		})
	}
}

func FuzzParsePins(f *testing.F) {
	for _, s := range []string{"10.244.1.5", "10.244.1.5,fd00::5", "fd00::5,", "::ffff:1.2.3.4", ",,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, value string) {
		got, err := ParsePins(value)
		if err != nil {
			return
		}
		if !got[0].IsValid() && !got[1].IsValid() {
			t.Fatalf("ParsePins(%q) accepted no address", value)
		}
		if (got[0].IsValid() && !got[0].Is4()) || (got[1].IsValid() && (!got[1].Is6() || got[1].Is4In6())) {
			t.Fatalf("ParsePins(%q) = %v: an address in the wrong family slot", value, got)
		}
	})
}

// TestAddPinnedAddresses: a pod's annotation pins its address in each
// family it names; a family it leaves out gets the next free address.
func TestAddPinnedAddresses(t *testing.T) {
	tests := []struct {
		name, pin string
		want      []string
		wantErr   string
	}{
		{name: "ipv4", pin: "10.244.0.9", want: []string{"10.244.0.9/24", "fd00:10:244::1/120"}},
		{name: "ipv6", pin: "fd00:10:244::9", want: []string{"10.244.0.1/24", "fd00:10:244::9/120"}},
		{name: "both", pin: "10.244.0.9,fd00:10:244::9", want: []string{"10.244.0.9/24", "fd00:10:244::9/120"}},
		{name: "ipv6 outside the pools", pin: "10.244.0.9,fd00:99::9", wantErr: "pinned address fd00:99::9 is outside every pool"},
		{name: "not an address", pin: "ten", wantErr: `annotation lockstep.dev/ip: "ten" is not an IP address`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, t.TempDir(), Config{}, "10.244.0.0/24", "fd00:10:244::/120")
			txn := f.svc.store.WriteTxn()
			pod := &policyapi.Pod{ObjectMeta: policyapi.ObjectMeta{Namespace: "ns", Name: "c001", Annotations: map[string]string{PinnedIPAnnotation: tc.pin}}}
			if err := store.UpsertPod(txn, pod); err != nil {
				txn.Abort()
				t.Fatal(err)
			}
			txn.Commit()
			resp, err := f.svc.Add(ctx, api.AddRequest{Attachment: att(1), Netns: "/run/netns/x", Pod: api.PodRef{Namespace: "ns", Name: "c001"}})
			if tc.wantErr != "" {
				var apiErr *api.Error
				if !errors.As(err, &apiErr) || apiErr.Code != api.CodeInvalidConfig || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Add = %v; want an invalid-config error containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, a := range resp.Addresses {
				got = append(got, a.Address.String())
			}
			if strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Errorf("addresses %v, want %v", got, tc.want)
			}
		})
	}
}

// TestAddPinRequiresNamespaceOptIn: in Kubernetes mode a tenant who may
// create pods must not pick the address other tenants allowlist. The pin
// is honoured only in a namespace an administrator labelled; anywhere
// else the ADD fails with an error that says how to allow it.
func TestAddPinRequiresNamespaceOptIn(t *testing.T) {
	tests := []struct {
		name    string
		labels  map[string]string // nil: no Namespace object at all
		pin     string            // empty: no annotation
		optIn   bool
		want    string // the IPv4 address given
		wantErr string
	}{
		{name: "labelled namespace: pin honoured", labels: map[string]string{PinNamespaceLabel: "true"}, pin: "10.244.0.9", optIn: true, want: "10.244.0.9/24"},
		{name: "unlabelled namespace: refused", labels: map[string]string{"team": "a"}, pin: "10.244.0.9", optIn: true,
			wantErr: "namespace ns does not allow pinned addresses; an administrator allows them with: kubectl label namespace ns lockstep.dev/allow-ip-pin=true"},
		{name: "label not true: refused", labels: map[string]string{PinNamespaceLabel: "yes"}, pin: "10.244.0.9", optIn: true, wantErr: "does not allow pinned addresses"},
		{name: "namespace unknown: refused", labels: nil, pin: "10.244.0.9", optIn: true, wantErr: "does not allow pinned addresses"},
		{name: "no pin in an unlabelled namespace: next free address", labels: map[string]string{}, optIn: true, want: "10.244.0.1/24"},
		{name: "manifests mode: honoured without a label", labels: map[string]string{}, pin: "10.244.0.9", optIn: false, want: "10.244.0.9/24"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, t.TempDir(), Config{PinOptIn: tc.optIn}, "10.244.0.0/24")
			txn := f.svc.store.WriteTxn()
			pod := &policyapi.Pod{ObjectMeta: policyapi.ObjectMeta{Namespace: "ns", Name: "c001"}}
			if tc.pin != "" {
				pod.Annotations = map[string]string{PinnedIPAnnotation: tc.pin}
			}
			err := store.UpsertPod(txn, pod)
			if err == nil && tc.labels != nil {
				err = store.UpsertNamespace(txn, &policyapi.Namespace{ObjectMeta: policyapi.ObjectMeta{Name: "ns", Labels: tc.labels}})
			}
			if err != nil {
				txn.Abort()
				t.Fatal(err)
			}
			txn.Commit()
			resp, err := f.svc.Add(ctx, api.AddRequest{Attachment: att(1), Netns: "/run/netns/x", Pod: api.PodRef{Namespace: "ns", Name: "c001"}})
			if tc.wantErr != "" {
				if api.CodeOf(err) != api.CodeInvalidConfig || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Add = %v; want an invalid-config error containing %q", err, tc.wantErr)
				}
				if e, err := store.EndpointByAttachment(f.svc.store.ReadTxn(), nil, toStore(att(1))); err != nil || e != nil {
					t.Errorf("a refused ADD left an endpoint behind: %v, %v", e, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Addresses) != 1 || resp.Addresses[0].Address.String() != tc.want {
				t.Errorf("addresses %v, want %s", resp.Addresses, tc.want)
			}
		})
	}
}

// TestConfirmEnforceErrorCodes: an Enforce that says "try again later"
// (Kubernetes mode: the pod object has not reached the agent yet) keeps
// its code, so the runtime retries; any other failure to put the policy
// in force is an internal error.
func TestConfirmEnforceErrorCodes(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		wantCode uint
	}{
		{"pod object late", api.Errorf(api.CodeTryAgainLater, "the pod is not known yet"), api.CodeTryAgainLater},
		{"apply failed", errors.New("apply: map full"), api.CodeInternal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t, t.TempDir(), Config{Enforce: func(context.Context, string, uint64) error { return tt.err }}, "10.244.0.0/24")
			resp, err := f.svc.Add(ctx, api.AddRequest{Attachment: att(1), Netns: "/x"})
			if err != nil {
				t.Fatal(err)
			}
			err = f.svc.Confirm(ctx, api.OpRequest{Attachment: att(1), OpID: resp.OpID})
			if api.CodeOf(err) != tt.wantCode {
				t.Errorf("Confirm() = %v (code %d), want code %d", err, api.CodeOf(err), tt.wantCode)
			}
		})
	}
}
