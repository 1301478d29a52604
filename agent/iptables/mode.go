package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
)

// Mode is the iptables variant lockstep drives: the legacy kernel tables
// (x_tables) or their nf_tables translation. Both can hold rules in one
// network namespace at the same time, and each is only visible to its own
// tools, so every command lockstep runs names the mode's tools explicitly
// (iptables-nft-restore, never plain iptables-restore).
type Mode uint8

// Modes. The zero Mode is invalid.
const (
	// ModeNFT is iptables-nft: iptables syntax on nf_tables (iptables 1.8+).
	ModeNFT Mode = iota + 1
	// ModeLegacy is iptables-legacy: the x_tables kernel API.
	ModeLegacy
)

// String returns the mode's backend name as the clean-up records spell it:
// "iptables-nft" or "iptables-legacy".
func (m Mode) String() string {
	switch m {
	case ModeNFT:
		return "iptables-nft"
	case ModeLegacy:
		return "iptables-legacy"
	}
	return fmt.Sprintf("iptables-mode(%d)", uint8(m))
}

// ParseMode is the inverse of Mode.String; it also accepts "nft" and
// "legacy".
func ParseMode(s string) (Mode, error) {
	switch s {
	case "iptables-nft", "nft":
		return ModeNFT, nil
	case "iptables-legacy", "legacy":
		return ModeLegacy, nil
	}
	return 0, fmt.Errorf("parse iptables mode %q: %w (want iptables-nft or iptables-legacy)", s, ErrUnknownMode)
}

// short is the mode's word in tool and set names.
func (m Mode) short() string {
	switch m {
	case ModeNFT:
		return "nft"
	case ModeLegacy:
		return "legacy"
	}
	return ""
}

func (m Mode) valid() bool { return m == ModeNFT || m == ModeLegacy }

// Family is an IP family: IPv4 rules live in iptables, IPv6 rules in
// ip6tables, and each has its own ipsets (family inet / inet6).
type Family uint8

// Families.
const (
	IPv4 Family = 4
	IPv6 Family = 6
)

// String returns "IPv4" or "IPv6".
func (f Family) String() string {
	if f == IPv6 {
		return "IPv6"
	}
	return "IPv4"
}

// index is f's slot in per-family arrays.
func (f Family) index() int {
	if f == IPv6 {
		return 1
	}
	return 0
}

// ipsetFamily is f as ipset names it.
func (f Family) ipsetFamily() string {
	if f == IPv6 {
		return "inet6"
	}
	return "inet"
}

var families = [2]Family{IPv4, IPv6}

// RestoreTool is the iptables-restore of mode m for family f, e.g.
// "ip6tables-legacy-restore".
func (m Mode) RestoreTool(f Family) string { return m.tool(f) + "-restore" }

// SaveTool is the iptables-save of mode m for family f, e.g.
// "iptables-nft-save".
func (m Mode) SaveTool(f Family) string { return m.tool(f) + "-save" }

func (m Mode) tool(f Family) string {
	base := "iptables"
	if f == IPv6 {
		base = "ip6tables"
	}
	return base + "-" + m.short()
}

// ipsetTool is the ipset binary. ipsets are not split by iptables mode: one
// set of sets per network namespace, which is why set names carry the mode.
const ipsetTool = "ipset"

// kubeletChains are the chains kubelet (1.17+) creates in the mangle table
// of the mode the node uses.
var kubeletChains = [...]string{"KUBE-IPTABLES-HINT", "KUBE-KUBELET-CANARY"}

// hasKubeletHint reports whether iptables-save output declares one of
// kubeletChains (a line ":CHAIN ..."). It is plain code rather than a
// regexp so that the package initialises nothing: the binary the CNI plugin
// shares runs every package's initialiser on each pod ADD.
func hasKubeletHint(save []byte) bool {
	for len(save) > 0 {
		line := save
		if i := bytes.IndexByte(save, '\n'); i >= 0 {
			line, save = save[:i], save[i+1:]
		} else {
			save = nil
		}
		name, ok := bytes.CutPrefix(line, []byte(":"))
		if !ok {
			continue
		}
		for _, chain := range kubeletChains {
			if rest, ok := bytes.CutPrefix(name, []byte(chain)); ok && (len(rest) == 0 || !isWordByte(rest[0])) {
				return true
			}
		}
	}
	return false
}

// isWordByte reports whether c is an ASCII letter, digit or underscore: a
// chain name goes on past it.
func isWordByte(c byte) bool {
	return c == '_' || '0' <= c && c <= '9' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
}

// Detect guesses which iptables mode the node uses, with the heuristic of
// kube-proxy's iptables-wrapper (kubernetes-sigs/iptables-wrappers):
//
//  1. kubelet's KUBE-IPTABLES-HINT or KUBE-KUBELET-CANARY chain in the
//     mangle table of iptables-nft (IPv4 or IPv6): nft;
//  2. the same chains anywhere in iptables-legacy: legacy (legacy-save is
//     not given -t mangle, which would create the table);
//  3. otherwise the mode with more rules ("-A" lines of iptables-save and
//     ip6tables-save together) wins; a tie, or no rules at all, is nft.
//
// Unlike the wrapper, lockstep's own rules do not vote in step 3: leftovers
// of an earlier lockstep in the other mode must not pull the node back to
// it. A tool that fails counts as no rules; Detect fails only when no save
// tool ran at all.
func Detect(ctx context.Context, r Runner) (Mode, error) {
	var errs []error
	ran := false
	save := func(m Mode, f Family, args ...string) []byte {
		out, err := r.Run(ctx, m.SaveTool(f), args, nil)
		if err != nil {
			errs = append(errs, err)
			return nil
		}
		ran = true
		return out
	}
	for _, f := range families {
		if hasKubeletHint(save(ModeNFT, f, "-t", "mangle")) {
			return ModeNFT, nil
		}
	}
	var legacy [2][]byte
	for i, f := range families {
		legacy[i] = save(ModeLegacy, f)
		if hasKubeletHint(legacy[i]) {
			return ModeLegacy, nil
		}
	}
	nLegacy := countRules(legacy[0]) + countRules(legacy[1])
	nNFT := 0
	for _, f := range families {
		nNFT += countRules(save(ModeNFT, f))
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("detect iptables mode: %w", err)
	}
	if !ran {
		return 0, fmt.Errorf("detect iptables mode: no iptables-save ran (are iptables-nft and iptables-legacy installed?): %w", errors.Join(errs...))
	}
	if nLegacy > nNFT {
		return ModeLegacy, nil
	}
	return ModeNFT, nil
}

// countRules counts the rules of an iptables-save dump that are not
// lockstep's: rules in lockstep chains and jumps into them.
func countRules(dump []byte) int {
	n := 0
	for line := range bytes.Lines(dump) {
		if len(line) == 0 || line[0] != '-' {
			continue
		}
		if bytes.Contains(line, []byte(chainPrefix)) && isLockstepRule(strings.TrimSpace(string(line))) {
			continue
		}
		n++
	}
	return n
}

// isLockstepRule reports whether an "-A CHAIN ..." line is in a lockstep
// chain or jumps to one.
func isLockstepRule(line string) bool {
	fields := strings.Fields(line)
	if len(fields) >= 2 && isLockstepChain(fields[1]) {
		return true
	}
	return isLockstepChain(ruleTarget(fields))
}
