// Package nodesim builds throwaway "nodes" and "pods" out of named network
// namespaces, so tests, benchmarks and the demo can run the real agent and
// CNI plugin without touching the machine's own interfaces, routes or
// firewall.
//
// Every namespace it creates is named PREFIX-PID-N. SweepStale removes the
// ones whose creating process is gone, so a test killed half-way does not
// leave namespaces behind for the next run.
//
// Processes that must live inside a node (the agent, CNI plugins run through
// libcni) are started from a thread that has entered the node namespace;
// the child inherits it. See Start and PluginExec.
package nodesim
