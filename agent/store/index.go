package store

import (
	"fmt"
	"net/netip"
)

// keyIndex is a typed single-value indexer. key extracts the index key of an
// object of type T (false when the object has no value for this index);
// args encodes lookup arguments. Keys are built with keyBuilder so that
// prefixes of the arguments are prefixes of the key.
type keyIndex[T any] struct {
	key  func(T) ([]byte, bool)
	args func(prefix bool, args ...any) ([]byte, error)
}

func (ix keyIndex[T]) FromObject(raw any) (bool, []byte, error) {
	obj, ok := raw.(T)
	if !ok {
		var want T
		return false, nil, fmt.Errorf("index object: got %T, want %T", raw, want)
	}
	k, ok := ix.key(obj)
	return ok, k, nil
}

func (ix keyIndex[T]) FromArgs(args ...any) ([]byte, error) { return ix.args(false, args...) }

func (ix keyIndex[T]) PrefixFromArgs(args ...any) ([]byte, error) { return ix.args(true, args...) }

// keyBuilder encodes compound keys: strings are NUL-terminated and
// addresses are a family byte and 16 bytes, so byte order is the natural
// order and a leading subset of fields is a key prefix.
type keyBuilder []byte

func (b keyBuilder) str(s string) keyBuilder { return append(append(b, s...), 0) }

func (b keyBuilder) addr(a netip.Addr) keyBuilder {
	family := byte(4)
	if a.Is6() && !a.Is4In6() {
		family = 6
	}
	a16 := a.As16()
	return append(append(b, family), a16[:]...)
}

// stringArgs encodes up to want string arguments. With prefix it accepts
// fewer and leaves out the terminator of the last one given, so a partial
// string is a prefix too.
func stringArgs(want int) func(bool, ...any) ([]byte, error) {
	return func(prefix bool, args ...any) ([]byte, error) {
		if len(args) > want || (!prefix && len(args) != want) || len(args) == 0 {
			return nil, fmt.Errorf("index needs %d string arguments, got %d", want, len(args))
		}
		var b keyBuilder
		for i, a := range args {
			s, ok := a.(string)
			if !ok {
				return nil, fmt.Errorf("index argument %d: got %T, want string", i, a)
			}
			b = b.str(s)
		}
		if prefix {
			b = b[:len(b)-1]
		}
		return b, nil
	}
}

// stringThenAddrArgs encodes (string, netip.Addr); with prefix the address
// may be left out.
func stringThenAddrArgs(prefix bool, args ...any) ([]byte, error) {
	if len(args) == 0 || len(args) > 2 || (!prefix && len(args) != 2) {
		return nil, fmt.Errorf("index needs (string, netip.Addr), got %d arguments", len(args))
	}
	s, ok := args[0].(string)
	if !ok {
		return nil, fmt.Errorf("index argument 0: got %T, want string", args[0])
	}
	b := keyBuilder{}.str(s)
	if len(args) == 1 {
		return b, nil
	}
	a, ok := args[1].(netip.Addr)
	if !ok {
		return nil, fmt.Errorf("index argument 1: got %T, want netip.Addr", args[1])
	}
	return b.addr(a), nil
}
