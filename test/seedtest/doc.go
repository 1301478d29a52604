// Package seedtest builds, for tests, the cluster of seed 000 in an agent
// store: namespace x, a server pod a, and pod b, the only pod with label
// pod2, which policy allow-b lets reach a; both are local endpoints, ls-a
// and ls-b. Every dataplane (the enforcer's model, iptables, HNS) replays
// the seed on this same state.
package seedtest
