package runtime

import "reflect"

// DeepCopy returns a copy of *in that shares no map, slice or pointer with
// it; nil stays nil and empty stays empty. Structs with unexported fields
// (time.Time) are copied as values. It is how the API types' DeepCopy
// methods are written: they are plain data, and their copies are rare
// (a read-modify-write, a test), so one reflective copy serves them all.
func DeepCopy[T any](in *T) *T {
	if in == nil {
		return nil
	}
	out := new(T)
	copyValue(reflect.ValueOf(out).Elem(), reflect.ValueOf(in).Elem())
	return out
}

func copyValue(dst, src reflect.Value) {
	switch src.Kind() {
	case reflect.Pointer:
		if src.IsNil() {
			return
		}
		p := reflect.New(src.Type().Elem())
		copyValue(p.Elem(), src.Elem())
		dst.Set(p)
	case reflect.Slice:
		if src.IsNil() {
			return
		}
		s := reflect.MakeSlice(src.Type(), src.Len(), src.Len())
		for i := range src.Len() {
			copyValue(s.Index(i), src.Index(i))
		}
		dst.Set(s)
	case reflect.Map:
		if src.IsNil() {
			return
		}
		m := reflect.MakeMapWithSize(src.Type(), src.Len())
		iter := src.MapRange()
		for iter.Next() {
			v := reflect.New(src.Type().Elem()).Elem()
			copyValue(v, iter.Value())
			m.SetMapIndex(iter.Key(), v)
		}
		dst.Set(m)
	case reflect.Struct:
		for i := range src.NumField() {
			if !src.Type().Field(i).IsExported() {
				dst.Set(src)
				return
			}
		}
		for i := range src.NumField() {
			copyValue(dst.Field(i), src.Field(i))
		}
	case reflect.Interface:
		if src.IsNil() {
			return
		}
		v := reflect.New(src.Elem().Type()).Elem()
		copyValue(v, src.Elem())
		dst.Set(v)
	default:
		dst.Set(src)
	}
}
