package podnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"lockstep.dev/lockstep/agent/api"
	"lockstep.dev/lockstep/agent/netsetup"
)

// steps records, in order, what the fake endpoints and the fake kernel
// were asked to do.
type steps struct {
	mu  sync.Mutex
	log []string
}

func (s *steps) add(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.log = append(s.log, fmt.Sprintf(format, args...))
}

func (s *steps) list() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// fakeEndpoints stands in for endpoints.Service.
type fakeEndpoints struct {
	steps      *steps
	addErr     error
	confirmErr error
	abortErr   error
	delResp    api.DelResponse
	getResp    api.Endpoint
	getErr     error
	lastAdd    api.AddRequest
	lastOp     api.OpRequest
}

func (f *fakeEndpoints) Add(_ context.Context, req api.AddRequest) (*api.AddResponse, error) {
	f.steps.add("reserve")
	f.lastAdd = req
	if f.addErr != nil {
		return nil, f.addErr
	}
	return &api.AddResponse{OpID: 7, HostIfName: hostIf, Addresses: []api.Address{
		{Pool: "10.244.0.0/24", Address: netip.MustParsePrefix("10.244.0.5/24")},
		{Pool: "fd00::/64", Address: netip.MustParsePrefix("fd00::5/64")},
	}}, nil
}

func (f *fakeEndpoints) Confirm(_ context.Context, op api.OpRequest) error {
	f.steps.add("confirm %d", op.OpID)
	f.lastOp = op
	return f.confirmErr
}

func (f *fakeEndpoints) Abort(ctx context.Context, op api.OpRequest) error {
	if ctx.Err() != nil {
		return fmt.Errorf("abort with an expired context: %w", ctx.Err())
	}
	f.steps.add("abort %d", op.OpID)
	return f.abortErr
}

func (f *fakeEndpoints) Del(context.Context, api.Attachment) (*api.DelResponse, error) {
	f.steps.add("release")
	resp := f.delResp
	return &resp, nil
}

func (f *fakeEndpoints) Get(context.Context, api.Attachment) (*api.Endpoint, error) {
	f.steps.add("get")
	if f.getErr != nil {
		return nil, f.getErr
	}
	ep := f.getResp
	return &ep, nil
}

var (
	att    = api.Attachment{ContainerID: "f00dcafe", IfName: "eth0"}
	hostIf = api.HostIfName(att.ContainerID, att.IfName)
	podMAC = net.HardwareAddr{0x0a, 0x58, 0x0a, 0xf4, 0x00, 0x05}
)

// harness is a Handler with fake endpoints and a fake kernel.
type harness struct {
	steps       *steps
	eps         *fakeEndpoints
	h           *Handler
	netns       *os.File
	setupErr    error
	teardownErr map[string]error
	checkErr    error
	lastSetup   netsetup.SetupArgs
	lastCheck   netsetup.CheckArgs
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	f, err := os.CreateTemp(t.TempDir(), "netns")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	s := &steps{}
	x := &harness{steps: s, eps: &fakeEndpoints{steps: s}, netns: f, teardownErr: map[string]error{}}
	x.h = &Handler{
		eps: x.eps,
		setup: func(_ context.Context, args netsetup.SetupArgs) (*netsetup.Wired, error) {
			s.add("wire %s", args.HostIf)
			x.lastSetup = args
			if x.setupErr != nil {
				return nil, x.setupErr
			}
			w := &netsetup.Wired{
				Host: netsetup.Link{Name: args.HostIf, MAC: netsetup.HostMAC},
				Pod:  netsetup.Link{Name: args.PodIf, MAC: podMAC},
			}
			for _, p := range args.Addresses {
				w.Addresses = append(w.Addresses, netip.PrefixFrom(p.Addr(), p.Addr().BitLen()))
			}
			return w, nil
		},
		teardown: func(name string) error {
			s.add("unwire %s", name)
			return x.teardownErr[name]
		},
		check: func(_ context.Context, args netsetup.CheckArgs) error {
			s.add("inspect %s", args.HostIf)
			x.lastCheck = args
			return x.checkErr
		},
	}
	return x
}

func (x *harness) add(t *testing.T) (*api.CNIAddResponse, error) {
	t.Helper()
	return x.h.CNIAdd(t.Context(), api.CNIAddRequest{Attachment: att, Netns: "/run/netns/pod", Pod: api.PodRef{Name: "web-0"}, MTU: 1450}, x.netns)
}

func TestCNIAdd(t *testing.T) {
	x := newHarness(t)
	resp, err := x.add(t)
	if err != nil {
		t.Fatalf("CNIAdd() error = %v", err)
	}
	if got, want := x.steps.list(), []string{"reserve", "wire " + hostIf, "confirm 7"}; !slices.Equal(got, want) {
		t.Fatalf("steps = %q, want %q", got, want)
	}
	if x.lastSetup.Netns != x.netns || x.lastSetup.MTU != 1450 || x.lastSetup.PodIf != "eth0" || len(x.lastSetup.Addresses) != 2 {
		t.Fatalf("wired with %+v, want the passed namespace, MTU 1450, eth0 and both addresses", x.lastSetup)
	}
	if x.eps.lastAdd.Netns != "/run/netns/pod" || x.eps.lastAdd.Pod.Name != "web-0" {
		t.Fatalf("reserved with %+v, want the runtime's netns and pod recorded", x.eps.lastAdd)
	}
	got := fmt.Sprintf("%s %s | %s %s | %v | %v", resp.HostIf.Name, resp.HostIf.MAC, resp.PodIf.Name, resp.PodIf.MAC, resp.IPs, resp.Routes)
	want := fmt.Sprintf("%s ee:ee:ee:ee:ee:ee | eth0 %s | [{10.244.0.5/32 169.254.1.1} {fd00::5/128 fe80::1}] | [{0.0.0.0/0 169.254.1.1} {::/0 fe80::1}]", hostIf, podMAC)
	if got != want {
		t.Fatalf("answer = %s\nwant     %s", got, want)
	}
	if len(resp.Addresses) != 2 || resp.Addresses[0].Pool != "10.244.0.0/24" {
		t.Fatalf("answer addresses = %v, want the pools'", resp.Addresses)
	}
}

// TestCNIAddRollsBack: past the reservation, a failure unwires first, so
// no route outlives its address, then aborts; and the error says what
// happened and what could not be undone.
func TestCNIAddRollsBack(t *testing.T) {
	tests := []struct {
		name        string
		setupErr    error
		confirmErr  error
		teardownErr error
		wantCode    uint
		wantMsg     string
		wantSteps   []string
	}{
		{
			name:      "wiring fails",
			setupErr:  errors.New("add address 10.244.0.5/32: permission denied"),
			wantCode:  api.CodeIOFailure,
			wantMsg:   "permission denied",
			wantSteps: []string{"reserve", "wire " + hostIf, "unwire " + hostIf, "abort 7"},
		},
		{
			name:      "address still routed",
			setupErr:  fmt.Errorf("add host route: %w", netsetup.ErrRouteTaken),
			wantCode:  api.CodeIOFailure,
			wantMsg:   "ip route get",
			wantSteps: []string{"reserve", "wire " + hostIf, "unwire " + hostIf, "abort 7"},
		},
		{
			name:      "config the wiring refuses",
			setupErr:  fmt.Errorf("%w: wire pod: MTU 1000 is below the IPv6 minimum 1280", netsetup.ErrInvalidArgs),
			wantCode:  api.CodeInvalidConfig,
			wantMsg:   "IPv6 minimum",
			wantSteps: []string{"reserve", "wire " + hostIf, "unwire " + hostIf, "abort 7"},
		},
		{
			name:      "time runs out while wiring",
			setupErr:  fmt.Errorf("open netlink socket in the pod: %w", context.DeadlineExceeded),
			wantCode:  api.CodeTryAgainLater,
			wantMsg:   "deadline exceeded",
			wantSteps: []string{"reserve", "wire " + hostIf, "unwire " + hostIf, "abort 7"},
		},
		{
			// The ADD/DEL race: a DEL arrived during the wiring and the
			// confirm is cancelled.
			name:       "DEL wins",
			confirmErr: api.Errorf(api.CodeCancelled, "ADD of %s/eth0 was cancelled", att.ContainerID),
			wantCode:   api.CodeCancelled,
			wantMsg:    "was cancelled",
			wantSteps:  []string{"reserve", "wire " + hostIf, "confirm 7", "unwire " + hostIf, "abort 7"},
		},
		{
			name:       "policy not in force",
			confirmErr: errors.New("enforce: dataplane busy"),
			wantCode:   api.CodeInternal,
			wantMsg:    "dataplane busy",
			wantSteps:  []string{"reserve", "wire " + hostIf, "confirm 7", "unwire " + hostIf, "abort 7"},
		},
		{
			name:        "rollback cannot unwire",
			confirmErr:  api.Errorf(api.CodeInternal, "write state: disk full"),
			teardownErr: errors.New("device busy"),
			wantCode:    api.CodeInternal,
			wantMsg:     "rollback could not remove the wiring",
			wantSteps:   []string{"reserve", "wire " + hostIf, "confirm 7", "unwire " + hostIf, "abort 7"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := newHarness(t)
			x.setupErr, x.eps.confirmErr = tt.setupErr, tt.confirmErr
			x.teardownErr[hostIf] = tt.teardownErr
			_, err := x.add(t)
			if api.CodeOf(err) != tt.wantCode || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("CNIAdd() error = %v, want code %d mentioning %q", err, tt.wantCode, tt.wantMsg)
			}
			if got := x.steps.list(); !slices.Equal(got, tt.wantSteps) {
				t.Fatalf("steps = %q, want %q", got, tt.wantSteps)
			}
		})
	}
}

// TestCNIAddAbortsAfterItsDeadline: an ADD that failed because its time
// ran out still gives its reservation back.
func TestCNIAddAbortsAfterItsDeadline(t *testing.T) {
	x := newHarness(t)
	ctx, cancel := context.WithCancel(t.Context())
	x.setupErr = errors.New("wire: context canceled")
	x.h.setup = func(context.Context, netsetup.SetupArgs) (*netsetup.Wired, error) {
		cancel()
		return nil, x.setupErr
	}
	_, err := x.h.CNIAdd(ctx, api.CNIAddRequest{Attachment: att}, x.netns)
	if err == nil || strings.Contains(err.Error(), "could not abort") {
		t.Fatalf("CNIAdd() error = %v, want the wiring's error and the reservation aborted", err)
	}
	if got := x.steps.list(); !slices.Contains(got, "abort 7") {
		t.Fatalf("steps = %q, want an abort", got)
	}
}

func TestCNIAddRefusesBeforeReserving(t *testing.T) {
	x := newHarness(t)
	_, err := x.h.CNIAdd(t.Context(), api.CNIAddRequest{Attachment: att}, nil)
	if api.CodeOf(err) != api.CodeInvalidNetNS {
		t.Fatalf("CNIAdd() without a namespace: %v, want code %d", err, api.CodeInvalidNetNS)
	}
	x.eps.addErr = api.Errorf(api.CodePoolExhausted, "no free address")
	if _, err := x.add(t); api.CodeOf(err) != api.CodePoolExhausted {
		t.Fatalf("CNIAdd() with the pool full: %v", err)
	}
	if got := x.steps.list(); !slices.Equal(got, []string{"reserve"}) {
		t.Fatalf("steps = %q, want only the failed reservation", got)
	}
}

func TestCNIDel(t *testing.T) {
	tests := []struct {
		name      string
		delResp   api.DelResponse
		wantSteps []string
	}{
		{
			name:      "agent had a record",
			delResp:   api.DelResponse{Found: true, HostIfName: hostIf},
			wantSteps: []string{"unwire " + hostIf, "release", "unwire " + hostIf},
		},
		{
			name:      "agent has no record",
			wantSteps: []string{"unwire " + hostIf, "release"},
		},
		{
			name:      "agent recorded another host interface",
			delResp:   api.DelResponse{Found: true, HostIfName: "ls000000000000"},
			wantSteps: []string{"unwire " + hostIf, "release", "unwire " + hostIf, "unwire ls000000000000"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := newHarness(t)
			x.eps.delResp = tt.delResp
			if _, err := x.h.CNIDel(t.Context(), att); err != nil {
				t.Fatalf("CNIDel() error = %v", err)
			}
			if got := x.steps.list(); !slices.Equal(got, tt.wantSteps) {
				t.Fatalf("steps = %q, want %q", got, tt.wantSteps)
			}
		})
	}
}

// TestCNIDelKeepsTheAddressWhileRouted: a link that cannot be removed
// fails DEL before the address is released.
func TestCNIDelKeepsTheAddressWhileRouted(t *testing.T) {
	x := newHarness(t)
	x.teardownErr[hostIf] = errors.New("device busy")
	_, err := x.h.CNIDel(t.Context(), att)
	if api.CodeOf(err) != api.CodeIOFailure || !strings.Contains(err.Error(), "the runtime retries DEL") {
		t.Fatalf("CNIDel() error = %v, want code 5 and a retry", err)
	}
	if got := x.steps.list(); slices.Contains(got, "release") {
		t.Fatalf("steps = %q: the address was released while still routed", got)
	}
}

func TestCNICheck(t *testing.T) {
	record := api.Endpoint{Attachment: att, HostIfName: hostIf, Addresses: []api.Address{{Address: netip.MustParsePrefix("10.244.0.5/24")}}}
	tests := []struct {
		name      string
		netns     bool
		getErr    error
		checkErr  error
		wantCode  uint
		wantDiffs []string
	}{
		{name: "consistent", netns: true},
		{name: "drift", netns: true, checkErr: &netsetup.MismatchError{Diffs: []string{"pod interface eth0 is down"}}, wantDiffs: []string{"pod interface eth0 is down"}},
		{name: "netns gone", netns: false, checkErr: &netsetup.MismatchError{Diffs: []string{"pod netns does not exist"}}, wantDiffs: []string{"pod netns does not exist"}},
		{name: "unknown attachment", netns: true, getErr: api.Errorf(api.CodeUnknownContainer, "no endpoint"), wantCode: api.CodeUnknownContainer},
		{name: "kernel unreadable", netns: true, checkErr: errors.New("netlink socket closed"), wantCode: api.CodeIOFailure},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			x := newHarness(t)
			x.eps.getResp, x.eps.getErr, x.checkErr = record, tt.getErr, tt.checkErr
			netns := x.netns
			if !tt.netns {
				netns = nil
			}
			resp, err := x.h.CNICheck(t.Context(), api.CNICheckRequest{Attachment: att, Netns: "/run/netns/pod"}, netns)
			if tt.wantCode != 0 {
				if api.CodeOf(err) != tt.wantCode {
					t.Fatalf("CNICheck() error = %v, want code %d", err, tt.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatalf("CNICheck() error = %v", err)
			}
			if !slices.Equal(resp.Diffs, tt.wantDiffs) || resp.Endpoint.HostIfName != hostIf {
				t.Fatalf("CNICheck() = %+v, want diffs %q and the record", resp, tt.wantDiffs)
			}
			if x.lastCheck.Netns != netns || x.lastCheck.HostIf != hostIf || x.lastCheck.PodIf != "eth0" || len(x.lastCheck.Addresses) != 1 {
				t.Fatalf("inspected with %+v, want the passed namespace and the record", x.lastCheck)
			}
		})
	}
}
