// Package server exposes the agent over HTTP: the versioned CNI API on a
// unix socket (mode 0600, request deadlines, one JSON error shape), and
// /healthz plus Prometheus /metrics on a loopback TCP port.
package server
