// Package benchkit holds what lockstep's benchmark tools (tools/cnibench,
// tools/policybench, tools/kubebench, tools/podstartbench, tools/svcbench)
// share: finding the repository, describing the machine a run measured,
// rendering the command line without this machine's paths, nearest-rank
// percentiles, progress lines, running a package's Go benchmarks as
// privileged tests, and rewriting a tool's own section of BENCHMARKS.md in
// place.
package benchkit
