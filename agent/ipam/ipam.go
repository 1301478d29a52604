package ipam

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"net/netip"
)

// ErrExhausted reports that a pool has no free usable address.
var ErrExhausted = errors.New("no free address")

// Usable returns the first and last address of p that may be handed to a
// pod. IPv4 pools larger than /31 lose their network and broadcast
// addresses; IPv6 pools larger than /127 lose the subnet-router anycast
// address (the first one). ok is false when nothing is usable.
func Usable(p netip.Prefix) (first, last netip.Addr, ok bool) {
	p = p.Masked()
	if !p.IsValid() {
		return first, last, false
	}
	first, last = p.Addr(), lastAddr(p)
	hostBits := p.Addr().BitLen() - p.Bits()
	switch {
	case p.Addr().Is4() && hostBits >= 2:
		first, last = first.Next(), last.Prev()
	case p.Addr().Is6() && hostBits >= 2:
		first = first.Next()
	}
	return first, last, true
}

// Size returns how many usable addresses p has, saturating at MaxUint64.
func Size(p netip.Prefix) uint64 {
	first, last, ok := Usable(p)
	if !ok {
		return 0
	}
	n := new(big.Int).Sub(toInt(last), toInt(first))
	n.Add(n, big.NewInt(1))
	if !n.IsUint64() {
		return math.MaxUint64
	}
	return n.Uint64()
}

// Contains reports whether addr is a usable address of p.
func Contains(p netip.Prefix, addr netip.Addr) bool {
	first, last, ok := Usable(p)
	return ok && p.Contains(addr) && addr.Compare(first) >= 0 && addr.Compare(last) <= 0
}

// Next returns the first usable address of p at or after start, wrapping
// around once, for which inUse is false. used is how many usable addresses
// are allocated; it lets Next fail fast on a full pool instead of scanning
// it. A start outside p means the first usable address.
func Next(p netip.Prefix, start netip.Addr, used uint64, inUse func(netip.Addr) (bool, error)) (netip.Addr, error) {
	first, last, ok := Usable(p)
	if !ok {
		return netip.Addr{}, fmt.Errorf("pool %s has no usable addresses: %w", p, ErrExhausted)
	}
	if used >= Size(p) {
		return netip.Addr{}, ErrExhausted
	}
	if !Contains(p, start) {
		start = first
	}
	// At most used+1 candidates are looked at: every skipped one is in use.
	addr := start
	for range used + 1 {
		busy, err := inUse(addr)
		if err != nil {
			return netip.Addr{}, err
		}
		if !busy {
			return addr, nil
		}
		if addr == last {
			addr = first
		} else {
			addr = addr.Next()
		}
	}
	return netip.Addr{}, ErrExhausted
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func toInt(a netip.Addr) *big.Int { return new(big.Int).SetBytes(a.AsSlice()) }
