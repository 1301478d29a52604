// Package maps describes the pinned BPF maps of lockstep's policy
// dataplane (bpf/lib/maps.h) for Go: their names, the Go twins of their key
// and value structs, and an inspection library behind `lockstep maps list`
// and `lockstep maps dump`.
//
// Every struct here mirrors one C struct and says which; TestLayoutMatchesBTF
// compares sizes and field offsets with the BTF of the committed object, so
// a change on one side without the other fails the build's tests rather than
// corrupting maps at run time. The dataplane itself (agent/datapath) writes
// these maps with the same structs.
//
// The inspection functions open pinned maps read-only and never change
// them: they are safe to run against a live node.
package bpfmaps
