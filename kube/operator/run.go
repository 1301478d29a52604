package operator

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"lockstep.dev/lockstep/kube/client"
)

// Defaults of Config, and of the lockstep operator flags.
const (
	DefaultMinFree            = 16
	DefaultExcessReleaseDelay = 180 * time.Second
	DefaultLeaseNamespace     = "kube-system"
	DefaultLeaseName          = "lockstep-operator"
	// DefaultLeaseDuration, DefaultRenewDeadline and DefaultRetryPeriod
	// are client-go's leader election defaults.
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
	// DefaultResync is how often the operator plans when nothing happens.
	DefaultResync = 30 * time.Second
	// DefaultMetricsAddr is the default of lockstep operator
	// --metrics-addr: every address, because the operator runs in the
	// host network and the kubelet probes, and Prometheus scrapes, the
	// node's address.
	DefaultMetricsAddr = ":9963"
)

// errLeaseTiming is returned for lease timings that cannot keep two
// replicas from leading at once.
var errLeaseTiming = errors.New("want lease duration > renew deadline > retry period > 0")

// Config configures Run. Zero durations and names take the defaults above.
type Config struct {
	// REST reaches the API server: client.InClusterConfig in a pod, or a
	// kubeconfig.
	REST *client.Config
	// MinFree is how many free addresses, per address family, each node
	// should have ahead of demand. Zero still keeps one free.
	MinFree int
	// ExcessReleaseDelay is how long a block must be excess, continuously,
	// before the operator marks it for release, and how long a mark found
	// on start-up waits before a release.
	ExcessReleaseDelay time.Duration
	// LeaderElect makes replicas take turns through a Lease; without it
	// this replica writes unconditionally, which is safe for one replica
	// only (or for a test that wants two writers).
	LeaderElect bool
	// LeaseNamespace and LeaseName name the Lease.
	LeaseNamespace, LeaseName string
	// Identity names this replica in the Lease and in pending block
	// assignments. Empty: $POD_NAME, else the host name, with a random
	// suffix.
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod time the election; see
	// elector.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Resync is how often the operator plans with no event to wake it.
	Resync time.Duration
	// Logger receives the operator's log; nil discards it.
	Logger *slog.Logger
	// MetricsAddr is the TCP address of /healthz, /readyz and /metrics
	// (":9963" listens on every address); empty serves none.
	MetricsAddr string

	// listening, when set (tests), receives the address the ops endpoint
	// listens on.
	listening func(addr string)
}

// withDefaults returns cfg with its zero fields set, or an error naming
// the field that cannot work.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.REST == nil {
		return cfg, errors.New("start operator: no API server configuration")
	}
	if cfg.MinFree < 0 {
		return cfg, fmt.Errorf("start operator: min free addresses %d is negative", cfg.MinFree)
	}
	if cfg.ExcessReleaseDelay < 0 {
		return cfg, fmt.Errorf("start operator: excess release delay %s is negative", cfg.ExcessReleaseDelay)
	}
	set := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	set(&cfg.LeaseDuration, DefaultLeaseDuration)
	set(&cfg.RenewDeadline, DefaultRenewDeadline)
	set(&cfg.RetryPeriod, DefaultRetryPeriod)
	set(&cfg.Resync, DefaultResync)
	if !(cfg.LeaseDuration > cfg.RenewDeadline && cfg.RenewDeadline > cfg.RetryPeriod && cfg.RetryPeriod > 0) {
		return cfg, fmt.Errorf("start operator: lease duration %s, renew deadline %s, retry period %s: %w",
			cfg.LeaseDuration, cfg.RenewDeadline, cfg.RetryPeriod, errLeaseTiming)
	}
	if cfg.LeaseNamespace == "" {
		cfg.LeaseNamespace = DefaultLeaseNamespace
	}
	if cfg.LeaseName == "" {
		cfg.LeaseName = DefaultLeaseName
	}
	if cfg.Identity == "" {
		cfg.Identity = defaultIdentity()
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg, nil
}

// defaultIdentity is $POD_NAME or the host name, with a random suffix: two
// processes must never share an identity, or both would think they hold
// the Lease.
func defaultIdentity() string {
	name := os.Getenv("POD_NAME")
	if name == "" {
		name, _ = os.Hostname()
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return name + "_" + hex.EncodeToString(b)
}

// Run runs the operator until ctx ends: with leader election, as many
// terms as this replica wins; without, one term. It returns nil when ctx
// ends and an error when it cannot start.
func Run(ctx context.Context, cfg Config) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	c, err := newClients(cfg.REST)
	if err != nil {
		return fmt.Errorf("start operator: %w", err)
	}
	o := newOpsState(&cfg)
	if cfg.MetricsAddr != "" {
		srv, err := o.listen(cfg.MetricsAddr)
		if err != nil {
			return fmt.Errorf("start operator: %w", err)
		}
		var stop context.CancelCauseFunc
		ctx, stop = context.WithCancelCause(ctx)
		defer stop(nil)
		go func() {
			if err := srv.Serve(); err != nil {
				stop(fmt.Errorf("serve health and metrics on %s: %w", srv.Addr(), err))
			}
		}()
		defer func() {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = srv.Shutdown(sctx)
		}()
		cfg.Logger.Info("serving /healthz, /readyz and /metrics", "addr", srv.Addr())
		if cfg.listening != nil {
			cfg.listening(srv.Addr())
		}
	}
	cfg.Logger.Info("starting operator", "identity", cfg.Identity, "min_free", cfg.MinFree,
		"excess_release_delay", cfg.ExcessReleaseDelay, "leader_elect", cfg.LeaderElect)
	term := func(ctx context.Context) error {
		o.term(true)
		defer o.term(false)
		return newController(c, &cfg, o).run(ctx)
	}
	if !cfg.LeaderElect {
		cfg.Logger.Warn("leader election is off: this replica writes whether or not another does")
		return stopCause(ctx, term(ctx))
	}
	e := &elector{
		leases:        c.leases,
		namespace:     cfg.LeaseNamespace,
		name:          cfg.LeaseName,
		identity:      cfg.Identity,
		leaseDuration: cfg.LeaseDuration,
		renewDeadline: cfg.RenewDeadline,
		retryPeriod:   cfg.RetryPeriod,
		log:           cfg.Logger,
		heartbeat:     o.loop("leader-election"),
		answered:      o.leaseAnswered,
	}
	return stopCause(ctx, e.run(ctx, term))
}

// stopCause is Run's result: err, or why ctx was cancelled when that was
// not its parent ending (the ops endpoint failed).
func stopCause(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); err == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}
