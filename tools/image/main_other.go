//go:build !linux

package main

import (
	"fmt"
	"os"
	"runtime"
)

// main explains that images are assembled from a Linux build machine's
// files and ELF binaries.
func main() {
	fmt.Fprintf(os.Stderr, "image: lockstep images are built on Linux (Debian), not %s\n", runtime.GOOS)
	os.Exit(2)
}
