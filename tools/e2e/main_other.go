//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "e2e: the real-node cluster runs on Linux only")
	os.Exit(1)
}
