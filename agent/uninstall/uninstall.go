//go:build linux

package uninstall

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"lockstep.dev/lockstep/agent/datapath"
	"lockstep.dev/lockstep/agent/iptables"
	"lockstep.dev/lockstep/agent/masquerade"
	"lockstep.dev/lockstep/agent/persist"
	"lockstep.dev/lockstep/agent/routes"
	"lockstep.dev/lockstep/bpfmaps"
)

// Run removes lockstep's state from the node as the package documentation
// describes, and returns a Report and the Report's errors joined. It
// refuses to start, with ErrAgentRunning, while an agent answers on
// o.Socket.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Runner == nil {
		o.Runner = iptables.ExecRunner{}
	}
	if err := CheckNoAgent(o.Socket); err != nil {
		return nil, err
	}
	r := &Report{}
	removeDatapath(r, o.BPFRoot)
	for _, m := range []iptables.Mode{iptables.ModeNFT, iptables.ModeLegacy} {
		removeIptables(ctx, r, o.Runner, m)
	}
	removeRoutes(r)
	removeSocket(r, o.Socket)
	removeState(r, o.StateDir, o.PurgeState)
	return r, errors.Join(r.Errors...)
}

// CheckNoAgent fails with ErrAgentRunning when something accepts
// connections on socket: an agent, which would put back what Run removes.
// A socket file nobody listens on is what a killed agent leaves.
func CheckNoAgent(socket string) error {
	c, err := net.DialTimeout("unix", socket, time.Second)
	if err != nil {
		return nil
	}
	c.Close()
	return fmt.Errorf("uninstall: %w: it answers on %s; stop it first (delete the lockstep-agent DaemonSet, or stop the process), then run uninstall again", ErrAgentRunning, socket)
}

func removeDatapath(r *Report, bpfRoot string) {
	filters, err := datapath.RemoveFilters()
	for _, f := range filters {
		r.removed("tc %s", f)
	}
	if err != nil {
		r.Errors = append(r.Errors, fmt.Errorf("remove tc filters: %w", err))
	}
	var pinned []string
	for _, name := range bpfmaps.Names {
		if _, err := os.Lstat(filepath.Join(bpfRoot, name)); err == nil {
			pinned = append(pinned, filepath.Join(bpfRoot, name))
		}
	}
	_, rootErr := os.Lstat(bpfRoot)
	if err := datapath.Remove(bpfRoot); err != nil {
		r.Errors = append(r.Errors, fmt.Errorf("remove pinned maps: %w", err))
		return
	}
	for _, p := range pinned {
		r.removed("pinned map %s", p)
	}
	switch _, err := os.Lstat(bpfRoot); {
	case rootErr == nil && errors.Is(err, fs.ErrNotExist):
		r.removed("bpf root %s", bpfRoot)
	case err == nil:
		// A mount point (a bpffs mounted on it) or a directory holding
		// files that are not lockstep's bpfmaps.
		r.Kept = append(r.Kept, fmt.Sprintf("bpf root %s: not empty or a mount point; holds none of lockstep's maps (unmount or remove it by hand if nothing else uses it)", bpfRoot))
	}
}

func removeIptables(ctx context.Context, r *Report, run iptables.Runner, m iptables.Mode) {
	if _, err := exec.LookPath(m.SaveTool(iptables.IPv4)); err != nil {
		r.Skipped = append(r.Skipped, fmt.Sprintf("%s: %s is not installed, so nothing of lockstep's can be in it", m, m.SaveTool(iptables.IPv4)))
		return
	}
	changes, err := masquerade.Remove(ctx, run, m)
	for _, ch := range changes {
		r.removed("%s %s nat chain %s and its jump from POSTROUTING (masquerade)", m, ch.Family, masquerade.ChainName)
	}
	if err != nil {
		r.Errors = append(r.Errors, fmt.Errorf("remove masquerade rules: %w", err))
	}
	before, err := iptables.ListLeftovers(ctx, run, m)
	if err != nil {
		r.Errors = append(r.Errors, err)
		return
	}
	after, err := iptables.Purge(ctx, run, m)
	if err != nil {
		r.Errors = append(r.Errors, fmt.Errorf("remove lockstep's rules and ipsets from %s: %w", m, err))
	}
	gone := func(present func(iptables.Leftovers) bool) bool { return err == nil || !present(after) }
	for _, j := range before.Jumps {
		if gone(func(l iptables.Leftovers) bool { return slices.Contains(l.Jumps, j) }) {
			r.removed("%s %s %s rule %s", m, j.Family, j.Table, j.Rule)
		}
	}
	for _, c := range before.Chains {
		if gone(func(l iptables.Leftovers) bool { return slices.Contains(l.Chains, c) }) {
			r.removed("%s %s %s chain %s", m, c.Family, c.Table, c.Chain)
		}
	}
	for _, s := range before.Sets {
		if gone(func(l iptables.Leftovers) bool { return slices.Contains(l.Sets, s) }) {
			r.removed("ipset %s", s)
		}
	}
}

func removeRoutes(r *Report) {
	res, err := routes.Apply(nil)
	for _, rt := range res.Removed {
		r.removed("route %s via %s (protocol %d)", rt.Dst, rt.Via, routes.Protocol)
	}
	if err != nil {
		r.Errors = append(r.Errors, fmt.Errorf("remove lockstep's routes: %w", err))
	}
}

func removeSocket(r *Report, socket string) {
	info, err := os.Lstat(socket)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return
	case err != nil:
		r.Errors = append(r.Errors, fmt.Errorf("remove socket: %w", err))
	case info.Mode().Type() != fs.ModeSocket:
		r.Kept = append(r.Kept, socket+": not a socket, so not the agent's")
	default:
		if err := os.Remove(socket); err != nil {
			r.Errors = append(r.Errors, fmt.Errorf("remove socket: %w", err))
			return
		}
		r.removed("socket %s", socket)
	}
}

func removeState(r *Report, dir string, purge bool) {
	file := filepath.Join(dir, persist.FileName)
	if _, err := os.Lstat(file); errors.Is(err, fs.ErrNotExist) {
		if purge {
			removeEmptyDir(r, dir)
		}
		return
	}
	if !purge {
		r.Kept = append(r.Kept, fmt.Sprintf("state file %s: pass --purge-state to remove it (an agent installed again would restore its allocations from it)", file))
		return
	}
	if err := os.Remove(file); err != nil {
		r.Errors = append(r.Errors, fmt.Errorf("remove state file: %w", err))
		return
	}
	r.removed("state file %s", file)
	removeEmptyDir(r, dir)
}

// removeEmptyDir removes dir if it is empty, and says why not otherwise.
func removeEmptyDir(r *Report, dir string) {
	err := os.Remove(dir)
	switch {
	case err == nil:
		r.removed("state directory %s", dir)
	case errors.Is(err, fs.ErrNotExist):
	case errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST):
		r.Kept = append(r.Kept, fmt.Sprintf("state directory %s: holds files lockstep did not write", dir))
	default:
		r.Errors = append(r.Errors, fmt.Errorf("remove state directory: %w", err))
	}
}
