// Package server exposes the agent: the versioned CNI API on a unix socket
// (mode 0600, request deadlines, one JSON error shape), and the agent's
// Prometheus metrics, which the agent serves on /metrics beside its
// probes (internal/ops).
package server
