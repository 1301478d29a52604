//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "svcbench: needs Linux (network namespaces, eBPF, a real-node cluster)")
	os.Exit(1)
}
