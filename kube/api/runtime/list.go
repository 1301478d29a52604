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

// ExtractList returns the items of a list (a struct with an Items slice of
// objects), in order, each a shallow copy of its own: an informer that
// keeps some of them does not keep the whole page's array alive.
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
		item := reflect.New(items.Type().Elem())
		item.Elem().Set(items.Index(i))
		obj, ok := item.Interface().(Object)
		if !ok {
			return nil, fmt.Errorf("extract list items: item %d of %T is not an API object", i, list)
		}
		out[i] = obj
	}
	return out, nil
}
