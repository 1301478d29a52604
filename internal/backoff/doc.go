// Package backoff is the one retry schedule of lockstep's loops: the
// enforcer's applies, the route and masquerade managers, the durable
// clean-ups, the informers and the Kubernetes source all wait after a
// failure with it instead of each keeping its own doubling arithmetic.
//
// A schedule starts at First after the first failure and doubles up to
// Max; a success resets it. Loops that record the number of consecutive
// failures themselves (the clean-ups, whose attempts are durable) ask
// for the wait after the n-th failure directly.
package backoff
