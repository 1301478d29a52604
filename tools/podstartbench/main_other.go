//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "podstartbench: needs Linux (a real-node cluster in network namespaces)")
	os.Exit(1)
}
