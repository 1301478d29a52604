//go:build !linux

package datapath

// Leftovers reports nothing: the eBPF dataplane cannot have run on this
// system, so it left no filters and no pinned maps.
func Leftovers(string) (int, error) { return 0, nil }

// Sweep has nothing to remove on this system (see Leftovers).
func Sweep(string) error { return nil }

// Filter is one of lockstep's tc filters (see the Linux version).
type Filter struct{ Link, Hook, Program string }

// RemoveFilters has nothing to remove on this system (see Leftovers).
func RemoveFilters() ([]Filter, error) { return nil, nil }
