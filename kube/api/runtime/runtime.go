package runtime

import (
	"net/url"

	"lockstep.dev/lockstep/kube/api/schema"
)

// Object is an API object or list: anything with an apiVersion and kind.
type Object interface {
	GetObjectKind() schema.ObjectKind
}

// ParameterCodec turns request options (ListOptions, ...) into the query
// parameters of a request.
type ParameterCodec interface {
	EncodeParameters(obj Object, to schema.GroupVersion) (url.Values, error)
}

// RawExtension is an object kept as the JSON it was read from.
type RawExtension struct {
	Raw []byte
}

// UnmarshalJSON keeps the JSON.
func (re *RawExtension) UnmarshalJSON(in []byte) error {
	if string(in) == "null" {
		re.Raw = nil
		return nil
	}
	re.Raw = append(re.Raw[:0], in...)
	return nil
}

// MarshalJSON writes the JSON kept, or null.
func (re RawExtension) MarshalJSON() ([]byte, error) {
	if re.Raw == nil {
		return []byte("null"), nil
	}
	return re.Raw, nil
}
