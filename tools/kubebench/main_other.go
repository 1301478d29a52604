//go:build !linux

package main

import (
	"fmt"
	"os"
	"runtime"
)

// main explains that kubebench builds its node out of Linux network namespaces.
func main() {
	fmt.Fprintf(os.Stderr, "kubebench: needs linux network namespaces, not %s; run it on a Linux machine\n", runtime.GOOS)
	os.Exit(2)
}
