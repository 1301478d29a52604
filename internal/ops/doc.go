// Package ops serves what operators of a long-running lockstep command
// probe and scrape, on one HTTP listener, in the conventions of the
// Kubernetes components (kube-apiserver's /livez and /readyz, the
// kubelet's /healthz):
//
//   - /healthz (also /livez) is liveness: is the process alive and are
//     its loops turning (internal/watchdog)? It must not depend on anything outside
//     the process, such as the API server: the kubelet restarts a
//     container whose liveness probe fails, and restarting the agent does
//     not bring an API server back.
//   - /readyz is readiness: has the command finished starting and does it
//     do its job (the agent serves CNI ADDs)? As on kube-apiserver, its
//     checks include the liveness checks: a command that is not alive is
//     not ready either.
//   - /metrics is the Prometheus text format (internal/promtext).
//
// A probe answers 200 and "ok" when every check passes, and 503 with one
// line per check ("[+]name ok", "[-]name failed: why") and a last line
// "healthz check failed" (or "readyz ...") when one does not. ?verbose
// lists the checks on success too, ?exclude=name skips one, and
// /healthz/NAME or /readyz/NAME runs a single check.
//
// Unlike the Kubernetes components, a failed check's reason is in the
// body, not withheld: these endpoints carry nothing secret, and the
// kubelet records the body of a failed probe in the pod's events, where
// the reason is what an operator needs.
package ops
