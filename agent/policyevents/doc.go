// Package policyevents tells a NetworkPolicy's owner, on the policy
// itself, that this node enforces it fail-closed: a Warning Event on the
// NetworkPolicy when it starts to fail (or fails for a new reason), a
// Normal one when it is enforced as written again. A node reports only the
// failed policies that select one of its pods, and announces the end of a
// failure only on a policy it reported that still exists. `kubectl describe
// networkpolicy` shows them, where a tenant who cannot read the agent's
// log or metrics looks.
//
// The agent's enforcer knows which policies fail (see
// enforcer.Failures); a Reporter takes each new set without blocking the
// apply that produced it, and posts the differences from a goroutine of
// its own, once per change and node. Events go through the core/v1 REST
// client lockstep already uses (kube/client), not client-go's typed
// clientset and event broadcaster, which the CNI binary cannot afford
// (cmd/lockstep/deps_test.go).
package policyevents
