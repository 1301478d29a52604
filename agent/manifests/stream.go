package manifests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	yaml "go.yaml.in/yaml/v3"

	"lockstep.dev/lockstep/internal/yamljson"
)

// A manifest file written by a tool is often one JSON v1 List holding the
// whole cluster: megabytes in one document. Read the general way, such a
// document becomes a YAML node tree, then a tree of maps, then JSON again,
// each several times the size of the file and all alive at once. jsonList
// reads it item by item instead: a load then costs the file plus one item.

// jsonList reads doc if it is a JSON v1 List, handing each item to
// l.object in turn. It returns false, having added nothing to l, for any
// other document, which document then reads the general way. Each item
// still goes through the YAML decoder and back to JSON, as in yamljson.ToJSON,
// so what is accepted, and every error, is as if the whole document had;
// only the line numbers of a YAML error count from the item's start.
func (l *loader) jsonList(where string, doc []byte) (bool, error) {
	doc = bytes.TrimSpace(doc)
	if len(doc) == 0 || doc[0] != '{' || !json.Valid(doc) {
		return false, nil
	}
	fields := jsonFields(doc)
	var apiVersion, kind string
	var items []byte
	seen := make(map[string]bool, len(fields))
	for _, f := range fields {
		if seen[f.key] {
			return false, nil // a repeated key: yamljson.ToJSON refuses it
		}
		seen[f.key] = true
		switch f.key {
		case "apiVersion":
			if json.Unmarshal(f.value, &apiVersion) != nil {
				return false, nil
			}
		case "kind":
			if json.Unmarshal(f.value, &kind) != nil {
				return false, nil
			}
		case "items":
			items = f.value
		}
	}
	if apiVersion != "v1" || kind != "List" || len(items) == 0 || items[0] != '[' {
		return false, nil
	}
	// One YAML decoder reads the items as a stream of documents: the same
	// conversion as yamljson.ToJSON, without a new parser for every item.
	elems := jsonElements(items)
	dec := yaml.NewDecoder(&itemStream{items: elems})
	for i := range elems {
		var v any
		if err := dec.Decode(&v); err != nil {
			// The decoder counts lines over the whole stream of items;
			// the item read alone says where in the item it failed.
			if _, itemErr := yamljson.ToJSON(elems[i]); itemErr != nil {
				err = itemErr
			}
			return true, fmt.Errorf("parse %s item %d: %w", where, i+1, err)
		}
		j, err := anyToJSON(v)
		if err != nil {
			return true, fmt.Errorf("parse %s item %d: %w", where, i+1, err)
		}
		if err := l.listItem(where, i+1, j); err != nil {
			return true, err
		}
	}
	return true, nil
}

// itemStream reads a List's items as a YAML stream, each item a document
// of its own: "---\n", the item, "\n", and so on. The items are valid JSON,
// where no line can start with "---", so they end where their documents do.
type itemStream struct {
	items [][]byte
	next  int    // the item after pending
	piece []byte // what is left of the current separator or item
	inSep bool   // piece is a separator, the item follows
}

var documentStart = []byte("\n---\n")

func (s *itemStream) Read(p []byte) (int, error) {
	for len(s.piece) == 0 {
		switch {
		case s.inSep:
			s.piece, s.inSep = s.items[s.next], false
			s.next++
		case s.next < len(s.items):
			s.piece, s.inSep = documentStart, true
		default:
			return 0, io.EOF
		}
	}
	n := copy(p, s.piece)
	s.piece = s.piece[n:]
	return n, nil
}

// listItem reads item i (from 1) of the List at where, as JSON from
// yamljson.ToJSON or anyToJSON.
func (l *loader) listItem(where string, i int, item []byte) error {
	item = bytes.TrimSpace(item)
	if len(item) == 0 || string(item) == "null" {
		return fmt.Errorf("parse %s item %d: empty item", where, i)
	}
	return l.object(fmt.Sprintf("%s item %d", where, i), item, false)
}

// jsonField is one member of a JSON object: its key, decoded, and its
// value, a slice of the object's text.
type jsonField struct {
	key   string
	value []byte
}

// jsonFields returns the members of obj, a valid JSON object, in order,
// repeated keys included. The values share obj's memory.
func jsonFields(obj []byte) []jsonField {
	var fields []jsonField
	i := skipSpace(obj, 1)
	for i < len(obj) && obj[i] == '"' {
		end := skipValue(obj, i)
		var key string
		_ = json.Unmarshal(obj[i:end], &key)      // a valid JSON string
		i = skipSpace(obj, skipSpace(obj, end)+1) // past the ':'
		end = skipValue(obj, i)
		fields = append(fields, jsonField{key, obj[i:end]})
		i = skipSpace(obj, end)
		if i < len(obj) && obj[i] == ',' {
			i = skipSpace(obj, i+1)
		}
	}
	return fields
}

// jsonElements returns the elements of arr, a valid JSON array, as slices
// of arr.
func jsonElements(arr []byte) [][]byte {
	var elems [][]byte
	i := skipSpace(arr, 1)
	for i < len(arr) && arr[i] != ']' {
		end := skipValue(arr, i)
		elems = append(elems, arr[i:end])
		i = skipSpace(arr, end)
		if i < len(arr) && arr[i] == ',' {
			i = skipSpace(arr, i+1)
		}
	}
	return elems
}

// skipSpace returns the offset of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the offset just past the JSON value starting at b[i].
// b must be valid JSON: skipValue only counts brackets outside strings.
func skipValue(b []byte, i int) int {
	depth := 0
	inString := false
	for ; i < len(b); i++ {
		c := b[i]
		switch {
		case inString:
			if c == '\\' {
				i++
			} else if c == '"' {
				inString = false
				if depth == 0 {
					return i + 1
				}
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			depth++
		case c == '}' || c == ']':
			if depth == 0 {
				return i // the end of the enclosing value: a literal ended here
			}
			depth--
			if depth == 0 {
				return i + 1
			}
		case depth == 0 && (c == ',' || c == ':' || c == ' ' || c == '\t' || c == '\n' || c == '\r'):
			return i // a literal (number, true, false, null) ended
		}
	}
	return i
}
