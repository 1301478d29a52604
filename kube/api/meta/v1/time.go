package v1

import (
	"encoding/json"
	"time"
)

// Time is a time the API writes in RFC 3339 to the second; the zero time
// is written as null.
//
// +kubebuilder:validation:Type=string
// +kubebuilder:validation:Format=date-time
type Time struct {
	time.Time `protobuf:"-"`
}

// NewTime returns t as a Time.
func NewTime(t time.Time) Time { return Time{t} }

// Now returns the current time. It keeps the nanoseconds; the API keeps
// seconds, so a Time read back from the server compares equal to it only
// by Equal on the truncated value.
func Now() Time { return Time{time.Now()} }

// Equal reports whether t and u are the same instant (nil equals nil).
func (t *Time) Equal(u *Time) bool {
	if t == nil || u == nil {
		return t == u
	}
	return t.Time.Equal(u.Time)
}

// IsZero reports whether t is nil or the zero time.
func (t *Time) IsZero() bool { return t == nil || t.Time.IsZero() }

// UnmarshalJSON reads an RFC 3339 time or null.
func (t *Time) UnmarshalJSON(b []byte) error {
	pt, err := readTime(b)
	t.Time = pt
	return err
}

// MarshalJSON writes the time in UTC to the second, or null.
func (t Time) MarshalJSON() ([]byte, error) {
	return writeTime(t.Time, time.RFC3339)
}

// DeepCopyInto copies t into out.
func (t *Time) DeepCopyInto(out *Time) { *out = *t }

// DeepCopy returns a copy of t.
func (t *Time) DeepCopy() *Time {
	if t == nil {
		return nil
	}
	out := new(Time)
	t.DeepCopyInto(out)
	return out
}

// RFC3339Micro is MicroTime's format.
const RFC3339Micro = "2006-01-02T15:04:05.000000Z07:00"

// MicroTime is a time the API writes to the microsecond (a Lease's renew
// time, an Event's time).
//
// +kubebuilder:validation:Type=string
// +kubebuilder:validation:Format=date-time
type MicroTime struct {
	time.Time `protobuf:"-"`
}

// NewMicroTime returns t as a MicroTime.
func NewMicroTime(t time.Time) MicroTime { return MicroTime{t} }

// NowMicro returns the current time.
func NowMicro() MicroTime { return MicroTime{time.Now()} }

// Equal reports whether t and u are the same instant (nil equals nil).
func (t *MicroTime) Equal(u *MicroTime) bool {
	if t == nil || u == nil {
		return t == u
	}
	return t.Time.Equal(u.Time)
}

// UnmarshalJSON reads an RFC 3339 time or null.
func (t *MicroTime) UnmarshalJSON(b []byte) error {
	pt, err := readTime(b)
	t.Time = pt
	return err
}

// MarshalJSON writes the time in UTC to the microsecond, or null.
func (t MicroTime) MarshalJSON() ([]byte, error) {
	return writeTime(t.Time, RFC3339Micro)
}

// DeepCopyInto copies t into out.
func (t *MicroTime) DeepCopyInto(out *MicroTime) { *out = *t }

// DeepCopy returns a copy of t.
func (t *MicroTime) DeepCopy() *MicroTime {
	if t == nil {
		return nil
	}
	out := new(MicroTime)
	t.DeepCopyInto(out)
	return out
}

// readTime reads the JSON of both time types: an RFC 3339 string (with or
// without fractions of a second), or null for the zero time. Times are
// kept in the local zone, as the upstream types keep them.
func readTime(b []byte) (time.Time, error) {
	if string(b) == "null" {
		return time.Time{}, nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return time.Time{}, err
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, err
	}
	return t.Local(), nil
}

// writeTime writes t in UTC in layout, or null for the zero time.
func writeTime(t time.Time, layout string) ([]byte, error) {
	if t.IsZero() {
		return []byte("null"), nil
	}
	return json.Marshal(t.UTC().Format(layout))
}
