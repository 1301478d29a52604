// Command cnibench measures what a pod start costs on a node: the lockstep
// CNI plugin against the reference ptp + host-local plugins, both run by the
// same libcni harness, in one process run, on the same machine.
//
//	sudo go run ./tools/cnibench -out BENCHMARKS.md   (or: make bench)
//
// It builds two simulated nodes with probe/nodesim: one runs the lockstep
// agent (its state file on a real disk, so every fsync is paid), the other
// only holds ptp's host-side links. Plugins are exec'd inside their node's
// network namespace exactly as a container runtime would exec them, and each
// pod gets its own network namespace, created before any clock starts.
//
// Four measurements are taken:
//
//   - Latency: -n sequential ADD-then-DEL iterations per plugin after
//     -warmup untimed ones, the plugins alternating iteration by iteration so
//     that machine noise lands on both. Each libcni AddNetworkList and
//     DelNetworkList call is timed on its own; the time includes exec'ing the
//     plugin binary.
//   - Exec floor: CNI VERSION through the same harness, i.e. what merely
//     starting the plugin binary costs. It tells how much of an ADD is the
//     plugin's own work. A static Go hello world, built in the same run
//     with `make build`'s flags and answering VERSION, takes turns with the
//     plugins: lockstep's start is judged against what starting any Go
//     binary costs on this machine at this moment, not against a number.
//   - Burst: -burst pods ADDed at once from as many goroutines, then DELed at
//     once. Every ADD must succeed and every address must be unique.
//   - Plugin CPU: the user+sys time of the plugin processes per ADD, read
//     from the rusage of reaped children. On a small machine it, not the
//     plugin's design, bounds burst throughput: N CPUs cannot start more
//     than N ÷ (CPU per ADD) plugins a second.
//
// The results are rendered as markdown tables, with a targets table that
// states each target (issue 17's, each relative to the reference plugins
// or the hello world of the same run) and whether the measured numbers
// meet it, and written
// between the cnibench markers of the -out file. Everything else in that file
// is left alone, so other benchmarks can share it.
//
// Every namespace is named cnibench-PID-N. Pods, nodes, the agent and the
// temporary directories are removed when the run ends, fails or is
// interrupted (SIGINT, SIGTERM); namespaces left by a run that was killed
// outright are swept at the start of the next one.
//
// cnibench needs root: it creates network namespaces and veth pairs. It never
// touches the machine's own interfaces, routes or firewall.
package main
