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
// people edit by hand, such as a kubeconfig: a bool field also takes YAML
// 1.1's yes/no/on/off/y/n, and a key given twice takes its last value, as
// kubectl's loader does. It is more lenient in one way: a scalar read into
// a string field is its text as written (`value: true` is "true", `name:
// 1.30` is "1.30"), where kubectl refuses a number or a boolean there.
// Elsewhere the document reads as Unmarshal reads it: a value read into an
// untyped field (any) follows YAML 1.2, so a bare `y` there is a string.
func UnmarshalTyped(doc []byte, v any) error {
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return err
	}
	w := typedWriter{budget: maxTypedNodes}
	if root.Kind == 0 {
		w.WriteString("null")
	} else if err := w.write(&root, reflect.TypeOf(v)); err != nil {
		return err
	}
	return json.Unmarshal(w.Bytes(), v)
}

// maxTypedNodes bounds the nodes UnmarshalTyped writes, aliases expanded:
// a few aliases of aliases ("billion laughs") must not make a small file
// expand without end.
const maxTypedNodes = 1 << 20

// typedWriter writes a YAML node tree as JSON, within its budget of nodes.
type typedWriter struct {
	bytes.Buffer
	budget int
}

// write writes n as JSON, reading each scalar as the Go type t that will
// receive it (nil when that is not known).
func (w *typedWriter) write(n *yaml.Node, t reflect.Type) error {
	if w.budget--; w.budget < 0 {
		return fmt.Errorf("read yaml: more than %d values with aliases expanded", maxTypedNodes)
	}
	b := &w.Buffer
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			b.WriteString("null")
			return nil
		}
		return w.write(n.Content[0], t)
	case yaml.AliasNode:
		return w.write(n.Alias, t)
	case yaml.MappingNode:
		b.WriteByte('{')
		for i := 0; i+1 < len(n.Content); i += 2 {
			key, value := n.Content[i], n.Content[i+1]
			if key.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: a mapping key must be a scalar", key.Line)
			}
			if i > 0 {
				b.WriteByte(',')
			}
			k, _ := json.Marshal(key.Value)
			b.Write(k)
			b.WriteByte(':')
			// encoding/json keeps the last of repeated keys.
			if err := w.write(value, fieldType(t, key.Value)); err != nil {
				return err
			}
		}
		b.WriteByte('}')
		return nil
	case yaml.SequenceNode:
		var elem reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && t.Elem().Kind() != reflect.Uint8 {
			elem = t.Elem()
		}
		b.WriteByte('[')
		for i, c := range n.Content {
			if i > 0 {
				b.WriteByte(',')
			}
			if err := w.write(c, elem); err != nil {
				return err
			}
		}
		b.WriteByte(']')
		return nil
	case yaml.ScalarNode:
		return writeScalar(b, n, t)
	}
	return fmt.Errorf("line %d: unexpected YAML node kind %d", n.Line, n.Kind)
}

func writeScalar(b *bytes.Buffer, n *yaml.Node, t reflect.Type) error {
	if n.ShortTag() == "!!null" {
		b.WriteString("null")
		return nil
	}
	if t != nil {
		switch t.Kind() {
		case reflect.String:
			s, _ := json.Marshal(n.Value)
			b.Write(s)
			return nil
		case reflect.Bool:
			switch strings.ToLower(n.Value) {
			case "y", "yes", "on", "true":
				b.WriteString("true")
				return nil
			case "n", "no", "off", "false":
				b.WriteString("false")
				return nil
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
	b.Write(j)
	return nil
}

// fieldType returns the type of what key names in t: a struct field by
// its json name (encoding/json's rules: exact, then any case; embedded
// structs without a name are searched too), a map's value type, or nil.
func fieldType(t reflect.Type, key string) reflect.Type {
	if t == nil {
		return nil
	}
	switch t.Kind() {
	case reflect.Map:
		return t.Elem()
	case reflect.Struct:
		if f, ok := structField(t, key, false); ok {
			return f
		}
		if f, ok := structField(t, key, true); ok {
			return f
		}
	}
	return nil
}

func structField(t reflect.Type, key string, fold bool) (reflect.Type, bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" && f.Anonymous {
			inner := f.Type
			if inner.Kind() == reflect.Pointer {
				inner = inner.Elem()
			}
			if inner.Kind() == reflect.Struct {
				if ft, ok := structField(inner, key, fold); ok {
					return ft, true
				}
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		if name == key || (fold && strings.EqualFold(name, key)) {
			return f.Type, true
		}
	}
	return nil, false
}
