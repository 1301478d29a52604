// Package benchkit holds what lockstep's benchmark tools (tools/cnibench,
// tools/policybench) share: finding the repository, describing the
// machine a run measured, rendering the command line without this
// machine's paths, and nearest-rank percentiles.
package benchkit
