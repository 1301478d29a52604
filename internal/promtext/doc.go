// Package promtext keeps counters, gauges and histograms and writes them in
// the Prometheus text exposition format (version 0.0.4).
//
// It exists because lockstep is one binary and Go runs every linked
// package's initialisation on every start, lockstep-cni's included. The
// Prometheus client library's initialisation measured 1.2 ms of each plugin
// start on the test machine, and a lighter metrics library read cgroup
// files and logged to stderr from a package-level initialiser. This
// package does nothing until it is used, and only the agent and the
// operator use it.
//
// It supports what they need and no more: metric families with
// constant label names, monotonic counters, histograms with fixed upper
// bounds, and gauges computed at scrape time.
package promtext
