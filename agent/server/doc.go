// Package server exposes the agent: the versioned CNI API on a unix socket
// (mode 0600, a connection cap, request deadlines that hold even when the
// work behind them cannot be interrupted, one JSON error shape), and the
// agent's Prometheus metrics, which the agent serves on /metrics beside its
// probes (internal/ops).
package server
