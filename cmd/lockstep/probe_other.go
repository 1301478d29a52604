//go:build !linux

package main

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

// newProbeCmd is `lockstep probe`, which builds a throwaway node out of
// Linux network namespaces: elsewhere it only says so.
func newProbeCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "probe --manifests DIR",
		Short: "Test NetworkPolicy with real packets on a throwaway local node (Linux only)",
		RunE: func(*cobra.Command, []string) error {
			return fmt.Errorf("probe: needs linux network namespaces, not %s: %w", runtime.GOOS, errors.ErrUnsupported)
		},
	}
}
