//go:build !linux

package routes

import "errors"

// ErrUnsupported: routes are programmed with netlink, on Linux only.
var ErrUnsupported = errors.New("routes to other nodes' blocks are programmed on Linux only")

// Apply is not available on this operating system.
func Apply([]Route) (Result, error) { return Result{}, ErrUnsupported }

// List is not available on this operating system.
func List() ([]Route, error) { return nil, ErrUnsupported }
