package fields

import "strings"

// Selector is a field selector.
type Selector interface {
	String() string
}

type oneTerm struct{ field, value string }

// OneTermEqualSelector selects the objects whose field equals value.
func OneTermEqualSelector(field, value string) Selector {
	return oneTerm{field: field, value: value}
}

// String returns the selector as the API's query parameter writes it: a
// backslash, comma or equals sign in the value is escaped with a
// backslash.
func (s oneTerm) String() string {
	var b strings.Builder
	b.WriteString(s.field)
	b.WriteByte('=')
	for _, r := range s.value {
		if r == '\\' || r == ',' || r == '=' {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}
