// Command lockstep is the single lockstep binary. Invoked as lockstep-cni
// (through a symlink, from any directory) it is the CNI plugin; invoked as
// lockstep it runs the subcommand named on its command line.
//
// The plugin runs on every pod ADD, so the dispatch happens before anything
// else is built: the CLI and the agent are never constructed on that path
// (deps_test.go keeps their packages out of the plugin's imports).
package main

import (
	"os"
	"path/filepath"

	"lockstep.dev/lockstep/cni/plugin"
)

func main() {
	if filepath.Base(os.Args[0]) == "lockstep-cni" {
		plugin.Main()
		return
	}
	os.Exit(runCLI(os.Args[1:]))
}
