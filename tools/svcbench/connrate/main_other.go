//go:build !linux

package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "connrate: needs Linux")
	os.Exit(1)
}
