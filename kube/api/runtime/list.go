package runtime

import (
	"fmt"
	"reflect"
)

// ListMeta is what a list tells about itself: the resourceVersion it was
// read at and the token of its next page.
type ListMeta interface {
	GetResourceVersion() string
	GetContinue() string
}

// ExtractList returns pointers to the items of a list (a struct with an
// Items slice of objects), in order; they point into the list.
func ExtractList(list Object) ([]Object, error) {
	v := reflect.ValueOf(list)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("extract list items: %T is not a pointer to a list", list)
	}
	items := v.Elem().FieldByName("Items")
	if !items.IsValid() || items.Kind() != reflect.Slice {
		return nil, fmt.Errorf("extract list items: %T has no Items slice", list)
	}
	out := make([]Object, items.Len())
	for i := range items.Len() {
		obj, ok := items.Index(i).Addr().Interface().(Object)
		if !ok {
			return nil, fmt.Errorf("extract list items: item %d of %T is not an API object", i, list)
		}
		out[i] = obj
	}
	return out, nil
}
