package intstr

import (
	"encoding/json"
	"fmt"
	"strconv"
)

// Type says which of IntOrString's fields holds its value.
type Type int64

// The two kinds of value.
const (
	Int Type = iota
	String
)

// IntOrString is a number or a string; in JSON it is whichever it holds.
type IntOrString struct {
	Type   Type
	IntVal int32
	StrVal string
}

// FromInt32 returns the number i.
func FromInt32(i int32) IntOrString { return IntOrString{Type: Int, IntVal: i} }

// FromString returns the string s.
func FromString(s string) IntOrString { return IntOrString{Type: String, StrVal: s} }

// String returns the value as text.
func (v *IntOrString) String() string {
	if v == nil {
		return "<nil>"
	}
	if v.Type == String {
		return v.StrVal
	}
	return strconv.Itoa(int(v.IntVal))
}

// IntValue returns the number, or the string read as a number (0 if it is
// not one).
func (v *IntOrString) IntValue() int {
	if v.Type == String {
		i, _ := strconv.Atoi(v.StrVal)
		return i
	}
	return int(v.IntVal)
}

// UnmarshalJSON reads a JSON number or string.
func (v *IntOrString) UnmarshalJSON(data []byte) error {
	if len(data) > 0 && data[0] == '"' {
		v.Type, v.IntVal = String, 0
		return json.Unmarshal(data, &v.StrVal)
	}
	v.Type, v.StrVal = Int, ""
	if err := json.Unmarshal(data, &v.IntVal); err != nil {
		return fmt.Errorf("read int or string %s: %w", data, err)
	}
	return nil
}

// MarshalJSON writes a JSON number or string.
func (v IntOrString) MarshalJSON() ([]byte, error) {
	if v.Type == String {
		return json.Marshal(v.StrVal)
	}
	return json.Marshal(v.IntVal)
}
