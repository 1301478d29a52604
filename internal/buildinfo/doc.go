// Package buildinfo reports which lockstep build is running. It imports only
// the standard library: the CNI plugin prints it on VERSION.
//
// A build made in a git checkout needs nothing: the Go toolchain stamps the
// commit, its time and whether the tree was modified into the binary, and
// Get reads them back. A build made elsewhere (an image build from copied
// sources, without .git) gets them from the linker instead, as the
// Makefile passes them:
//
//	-X lockstep.dev/lockstep/internal/buildinfo.Version=v0.1.0
//	-X lockstep.dev/lockstep/internal/buildinfo.Commit=0123abc...
//	-X lockstep.dev/lockstep/internal/buildinfo.Date=2026-11-26T16:00:00Z
//
// A value set by the linker wins over the stamped one.
package buildinfo
