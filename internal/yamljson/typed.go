package yamljson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// UnmarshalTyped reads one YAML document into v, reading each scalar as
// the type of the field that receives it, for files kubectl reads and
// people edit by hand, such as a kubeconfig. As kubectl's loader: a bool
// field also takes YAML 1.1's unquoted y, yes, n, no, on and off (in their
// three spellings), a key given twice takes its last value, and merge keys
// (`<<: *base`) bring in the keys of the mappings they name, explicit keys
// winning. More lenient than kubectl in one way: a scalar read into a
// string field is its text as written (`value: true` is "true", `name:
// 1.30` is "1.30"), where kubectl refuses a number or a boolean there.
// Elsewhere the document reads as Unmarshal reads it: a value read into an
// untyped field (any) follows YAML 1.2, so a bare `y` there is a string.
func UnmarshalTyped(doc []byte, v any) error {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return err
	}
	w := typedWriter{values: maxTypedValues, active: map[*yaml.Node]bool{}}
	if root.Kind == 0 {
		w.WriteString("null")
	} else if err := w.write(&root, reflect.TypeOf(v)); err != nil {
		return err
	}
	return json.Unmarshal(w.Bytes(), v)
}

// What UnmarshalTyped writes, aliases expanded, is bounded: a few aliases
// of aliases ("billion laughs"), or one long scalar aliased many times,
// must not make a small file expand without end.
const (
	maxTypedValues = 1 << 20
	maxTypedBytes  = 64 << 20
)

// typedWriter writes a YAML node tree as JSON, within its bounds.
type typedWriter struct {
	bytes.Buffer
	values int                 // values left to write
	active map[*yaml.Node]bool // anchors being expanded, to refuse one that contains itself
}

// resolve follows an alias to its anchor, refusing an anchor that is
// being expanded already (one that contains itself). done must be called
// when the anchor's expansion ends.
func (w *typedWriter) resolve(n *yaml.Node) (target *yaml.Node, done func(), err error) {
	if n.Kind != yaml.AliasNode {
		return n, func() {}, nil
	}
	if w.active[n.Alias] {
		return nil, nil, fmt.Errorf("line %d: anchor %q contains itself", n.Line, n.Value)
	}
	w.active[n.Alias] = true
	inner, innerDone, err := w.resolve(n.Alias)
	if err != nil {
		delete(w.active, n.Alias)
		return nil, nil, err
	}
	return inner, func() { innerDone(); delete(w.active, n.Alias) }, nil
}

// spend counts one value and checks both bounds.
func (w *typedWriter) spend() error {
	if w.values--; w.values < 0 {
		return fmt.Errorf("read yaml: more than %d values with aliases expanded", maxTypedValues)
	}
	if w.Len() > maxTypedBytes {
		return fmt.Errorf("read yaml: more than %d bytes with aliases expanded", maxTypedBytes)
	}
	return nil
}

// write writes n as JSON, reading each scalar as the Go type t that will
// receive it (nil when that is not known).
func (w *typedWriter) write(n *yaml.Node, t reflect.Type) error {
	if err := w.spend(); err != nil {
		return err
	}
	n, done, err := w.resolve(n)
	if err != nil {
		return err
	}
	defer done()
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			w.WriteString("null")
			return nil
		}
		return w.write(n.Content[0], t)
	case yaml.MappingNode:
		pairs, err := w.pairs(n)
		if err != nil {
			return err
		}
		w.WriteByte('{')
		for i, p := range pairs {
			if i > 0 {
				w.WriteByte(',')
			}
			k, _ := json.Marshal(p.key)
			w.Write(k)
			w.WriteByte(':')
			if err := w.write(p.value, fieldType(t, p.key)); err != nil {
				return err
			}
		}
		w.WriteByte('}')
		return nil
	case yaml.SequenceNode:
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && t.Elem().Kind() != reflect.Uint8 {
			elem = t.Elem()
		}
		w.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				w.WriteByte(',')
			}
			if err := w.write(c, elem); err != nil {
				return err
			}
		}
		w.WriteByte(']')
		return nil
	case yaml.ScalarNode:
		return w.scalar(n, t)
	}
	return fmt.Errorf("line %d: unexpected YAML node kind %d", n.Line, n.Kind)
}

// pair is one key of a mapping and its value.
type pair struct {
	key   string
	value *yaml.Node
}

// pairs returns a mapping's keys and values as they apply: of a key given
// twice the last, and the keys merge keys bring in (the first mapping a
// merge names that has the key) unless the mapping has the key itself.
func (w *typedWriter) pairs(n *yaml.Node) ([]pair, error) {
	var explicit, merged []pair
	for i := 0; i+1 < len(n.Content); i += 2 {
		key, done, err := w.resolve(n.Content[i])
		if err != nil {
			return nil, err
		}
		done()
		if key.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("line %d: a mapping key must be a scalar", key.Line)
		}
		if key.ShortTag() != "!!merge" {
			explicit = append(explicit, pair{key: key.Value, value: n.Content[i+1]})
			continue
		}
		more, err := w.mergeSources(n.Content[i+1])
		if err != nil {
			return nil, err
		}
		merged = append(merged, more...)
	}
	var out []pair
	at := map[string]int{}
	for _, p := range merged { // the first source that has a key gives it
		if _, ok := at[p.key]; !ok {
			at[p.key] = len(out)
			out = append(out, p)
		}
	}
	for _, p := range explicit { // the mapping's own keys win, the last of each
		if i, ok := at[p.key]; ok {
			out[i] = p
			continue
		}
		at[p.key] = len(out)
		out = append(out, p)
	}
	return out, nil
}

// mergeSources returns the pairs a merge key's value brings in: one
// mapping, or a sequence of them (earlier ones first).
func (w *typedWriter) mergeSources(v *yaml.Node) ([]pair, error) {
	if err := w.spend(); err != nil {
		return nil, err
	}
	src, done, err := w.resolve(v)
	if err != nil {
		return nil, err
	}
	defer done()
	switch src.Kind {
	case yaml.MappingNode:
		return w.pairs(src)
	case yaml.SequenceNode:
		var out []pair
		for _, item := range src.Content {
			m, doneItem, err := w.resolve(item)
			if err != nil {
				return nil, err
			}
			if m.Kind != yaml.MappingNode {
				doneItem()
				return nil, fmt.Errorf("line %d: a merge key takes mappings", item.Line)
			}
			ps, err := w.pairs(m)
			doneItem()
			if err != nil {
				return nil, err
			}
			out = append(out, ps...)
		}
		return out, nil
	}
	return nil, fmt.Errorf("line %d: a merge key takes a mapping or a list of them", v.Line)
}

// yaml11Bools are the words YAML 1.1 reads as booleans.
func yaml11Bool(s string) (value, ok bool) {
	switch s {
	case "y", "Y", "yes", "Yes", "YES", "true", "True", "TRUE", "on", "On", "ON":
		return true, true
	case "n", "N", "no", "No", "NO", "false", "False", "FALSE", "off", "Off", "OFF":
		return false, true
	}
	return false, false
}

func (w *typedWriter) scalar(n *yaml.Node, t reflect.Type) error {
	if n.ShortTag() == "!!null" {
		w.WriteString("null")
		return nil
	}
	if t != nil {
		switch t.Kind() {
		case reflect.String:
			s, _ := json.Marshal(n.Value)
			w.Write(s)
			return nil
		case reflect.Bool:
			if n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle) == 0 {
				if b, ok := yaml11Bool(n.Value); ok {
					fmt.Fprint(w, b)
					return nil
				}
			}
		}
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return err
	}
	j, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	w.Write(j)
	return nil
}

// fieldType returns the type of what key names in t: a struct field by
// its json name as encoding/json finds it (an exact name before one that
// differs in case, a shallower field before one of an embedded struct), a
// map's value type, or nil.
func fieldType(t reflect.Type, key string) reflect.Type {
	if t == nil {
		return nil
	}
	switch t.Kind() {
	case reflect.Map:
		return t.Elem()
	case reflect.Struct:
		for _, fold := range []bool{false, true} {
			if f, ok := structField(t, key, fold); ok {
				return f
			}
		}
	}
	return nil
}

// structField finds key among t's fields, then among those of its
// embedded structs.
func structField(t reflect.Type, key string, fold bool) (reflect.Type, bool) {
	var embedded []reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		inner := f.Type
		if inner.Kind() == reflect.Pointer {
			inner = inner.Elem()
		}
		if name == "" && f.Anonymous && inner.Kind() == reflect.Struct {
			embedded = append(embedded, inner)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if name == key || (fold && strings.EqualFold(name, key)) {
			return f.Type, true
		}
	}
	for _, inner := range embedded {
		if ft, ok := structField(inner, key, fold); ok {
			return ft, true
		}
	}
	return nil, false
}
