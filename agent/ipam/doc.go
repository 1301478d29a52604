// Package ipam is the pure address arithmetic behind lockstep's node IPAM:
// which addresses of a pool are usable, how many there are, and which free
// address comes next. It holds no state and does no I/O; the endpoints
// service asks it for candidates inside a store transaction, so an address
// is chosen and recorded atomically.
package ipam
