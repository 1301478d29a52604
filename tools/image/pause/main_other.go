//go:build !linux

package main

import (
	"fmt"
	"os"
)

// main explains that a pod sandbox is a Linux process.
func main() {
	fmt.Fprintln(os.Stderr, "pause: pod sandboxes run on Linux")
	os.Exit(2)
}
