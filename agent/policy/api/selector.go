package api

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Selector is a validated LabelSelector, ready to match. Its requirements
// are sorted so that Key() is canonical: two selectors that are written
// differently but mean the same (map order, value order) share a cache
// entry.
type Selector struct {
	reqs []requirement
}

type requirement struct {
	key    string
	op     LabelSelectorOperator
	values []string // sorted, deduplicated
}

// ParseSelector validates s and returns its matcher. s must not be nil:
// what a nil selector means depends on where it appears, so the caller
// decides (see compile.go).
func ParseSelector(s *LabelSelector) (*Selector, error) {
	sel := &Selector{}
	for k, v := range s.MatchLabels {
		if err := validateLabelKey(k); err != nil {
			return nil, fmt.Errorf("matchLabels: %w", err)
		}
		if err := validateLabelValue(v); err != nil {
			return nil, fmt.Errorf("matchLabels[%q]: %w", k, err)
		}
		sel.reqs = append(sel.reqs, requirement{key: k, op: OpIn, values: []string{v}})
	}
	for i, e := range s.MatchExpressions {
		if err := validateLabelKey(e.Key); err != nil {
			return nil, fmt.Errorf("matchExpressions[%d]: %w", i, err)
		}
		switch e.Operator {
		case OpIn, OpNotIn:
			if len(e.Values) == 0 {
				return nil, fmt.Errorf("matchExpressions[%d]: operator %s needs at least one value", i, e.Operator)
			}
			for _, v := range e.Values {
				if err := validateLabelValue(v); err != nil {
					return nil, fmt.Errorf("matchExpressions[%d]: %w", i, err)
				}
			}
		case OpExists, OpDoesNotExist:
			if len(e.Values) != 0 {
				return nil, fmt.Errorf("matchExpressions[%d]: operator %s takes no values", i, e.Operator)
			}
		default:
			return nil, fmt.Errorf("matchExpressions[%d]: unknown operator %q (want In, NotIn, Exists or DoesNotExist)", i, e.Operator)
		}
		vals := slices.Clone(e.Values)
		slices.Sort(vals)
		sel.reqs = append(sel.reqs, requirement{key: e.Key, op: e.Operator, values: slices.Compact(vals)})
	}
	sort.Slice(sel.reqs, func(i, j int) bool {
		a, b := sel.reqs[i], sel.reqs[j]
		if a.key != b.key {
			return a.key < b.key
		}
		if a.op != b.op {
			return a.op < b.op
		}
		return slices.Compare(a.values, b.values) < 0
	})
	return sel, nil
}

// matches reports whether labels satisfy every requirement. NotIn is true
// for a missing key, as in Kubernetes.
func (s *Selector) Matches(labels map[string]string) bool {
	for _, r := range s.reqs {
		v, ok := labels[r.key]
		switch r.op {
		case OpIn:
			if !ok || !containsSorted(r.values, v) {
				return false
			}
		case OpNotIn:
			if ok && containsSorted(r.values, v) {
				return false
			}
		case OpExists:
			if !ok {
				return false
			}
		case OpDoesNotExist:
			if ok {
				return false
			}
		}
	}
	return true
}

// Key returns a canonical encoding of the selector.
func (s *Selector) Key() string {
	var b strings.Builder
	for _, r := range s.reqs {
		fmt.Fprintf(&b, "%q %s %q;", r.key, r.op, r.values)
	}
	return b.String()
}

// Equal reports whether two selectors have the same requirements; nil
// equals only nil.
func (s *Selector) Equal(o *Selector) bool {
	if s == nil || o == nil {
		return s == o
	}
	return slices.EqualFunc(s.reqs, o.reqs, func(x, y requirement) bool {
		return x.key == y.key && x.op == y.op && slices.Equal(x.values, y.values)
	})
}

func containsSorted(vals []string, v string) bool {
	_, ok := slices.BinarySearch(vals, v)
	return ok
}

// Matches reports whether the selector matches labels. The empty selector
// matches every label set; a nil selector matches nothing (the meaning
// Kubernetes gives a selector that is absent, except where a field says
// otherwise). An invalid selector is an error.
func (s *LabelSelector) Matches(labels map[string]string) (bool, error) {
	if s == nil {
		return false, nil
	}
	sel, err := ParseSelector(s)
	if err != nil {
		return false, err
	}
	return sel.Matches(labels), nil
}

// validateLabelKey checks a Kubernetes qualified name: an optional DNS
// subdomain prefix and '/', then a name of at most 63 characters.
func validateLabelKey(k string) error {
	name := k
	if i := strings.LastIndexByte(k, '/'); i >= 0 {
		prefix := k[:i]
		name = k[i+1:]
		if !isDNSSubdomain(prefix) {
			return fmt.Errorf("label key %q: prefix must be a DNS subdomain", k)
		}
	}
	if name == "" || len(name) > 63 || !isLabelToken(name) {
		return fmt.Errorf("label key %q: name must be 1-63 alphanumeric characters, '-', '_' or '.', starting and ending alphanumeric", k)
	}
	return nil
}

// validateLabelValue checks a label value: empty, or at most 63 characters
// of the label token alphabet.
func validateLabelValue(v string) error {
	if v == "" {
		return nil
	}
	if len(v) > 63 || !isLabelToken(v) {
		return fmt.Errorf("label value %q: must be at most 63 alphanumeric characters, '-', '_' or '.', starting and ending alphanumeric", v)
	}
	return nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func isLabelToken(s string) bool {
	if !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

func isDNSSubdomain(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, part := range strings.Split(s, ".") {
		if part == "" || len(part) > 63 {
			return false
		}
		for i := 0; i < len(part); i++ {
			c := part[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
		if part[0] == '-' || part[len(part)-1] == '-' {
			return false
		}
	}
	return true
}
