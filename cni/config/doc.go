// Package config turns what a container runtime hands the lockstep CNI
// plugin — the network configuration on stdin and the CNI_ARGS string — into
// validated values, or into a CNI error that tells the operator what to fix.
//
// It is pure on purpose: no netlink, no sockets, no files. That keeps it
// cheap on the plugin's hot path and lets it be fuzzed. Every input a runtime
// or an operator controls passes through here before the plugin calls the
// agent or touches a namespace, so a malformed config fails with CNI code 7
// (invalid network config) and a malformed CNI_ARGS with code 4 (invalid
// environment variables), before anything was reserved or wired.
//
// Kubernetes names are checked with lockstep's own DNS-1123 rules rather
// than apimachinery's: the plugin starts on every pod ADD and must not link
// the Kubernetes client libraries.
package config
