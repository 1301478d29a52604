// Package cleanup finishes what a dataplane backend change leaves behind.
//
// When a node's dataplane changes — iptables-legacy to iptables-nft after an
// OS upgrade, or iptables to eBPF — the rules, sets, programs and maps
// lockstep wrote into the old backend keep filtering packets until somebody
// removes them. Azure NPM's seed 002 bug is what happens when that removal
// is best effort: one attempt at start-up, a retry queue that ran the new
// backend's tools against the old backend's chains and never flushed them,
// and nothing on disk, so a restart forgot what was still owed.
//
// Here a pending clean-up is a row of the agent's store (table
// store.TableCleanups) written to the state file in the same commit, so it
// survives a crash or restart. The Manager retries each one with backoff
// until its Cleaner — which always uses the tools of the backend the
// leftovers live in — reports that nothing is left, and only then deletes
// the row. Every attempt's error is recorded on the row, where
// `lockstep status` and /metrics show it.
package cleanup
