//go:build linux

package main

import (
	"os/exec"
	"strings"

	"lockstep.dev/lockstep/test/benchkit"
)

// facts describe the machine and build a run measured, and the iperf3
// the throughput runs used.
type facts struct {
	benchkit.Machine
	iperf string
}

// gatherFacts records the machine and build; loadAtStart is /proc/loadavg's
// first three fields when the run started.
func gatherFacts(cfg config, binDir, loadAtStart string) facts {
	f := facts{
		Machine: benchkit.GatherMachine("tools/policybench", cfg.args, binDir, loadAtStart),
		iperf:   "unknown",
	}
	if out, err := exec.Command("iperf3", "--version").Output(); err == nil {
		if line, _, _ := strings.Cut(string(out), "\n"); line != "" {
			f.iperf = strings.TrimSpace(line)
		}
	}
	return f
}
