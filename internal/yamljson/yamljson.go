// Package yamljson converts between YAML and JSON, so that YAML is read and
// written through the json tags of Go types, as Kubernetes tools do.
//
// ToJSON and Unmarshal parse YAML under YAML 1.2's core schema
// (go.yaml.in/yaml/v3): only true and false are booleans, so label values
// such as `y`, `on` or `no` stay the strings their authors wrote, and
// duplicate keys are an error. UnmarshalTyped reads files kubectl also
// reads (a kubeconfig) as kubectl does; Marshal writes what both YAML 1.1
// and 1.2 readers read back the same.
package yamljson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// ToJSON converts one YAML document to JSON: nil for an empty document.
func ToJSON(doc []byte) ([]byte, error) {
	var v any
	if err := yaml.Unmarshal(doc, &v); err != nil {
		return nil, err
	}
	if v == nil {
		return nil, nil
	}
	j, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("convert yaml to json: %w", err)
	}
	return j, nil
}

// Unmarshal reads one YAML document into v through v's json tags.
func Unmarshal(doc []byte, v any) error {
	j, err := ToJSON(doc)
	if err != nil {
		return err
	}
	if j == nil {
		j = []byte("null")
	}
	return json.Unmarshal(j, v)
}

// Marshal writes v as a block-style YAML document, indented by two
// spaces, with the fields and values its JSON has (JSON is YAML, so its
// scalars are kept exactly). A string a YAML 1.1 reader would take for
// something else (yes, off, y, 1:20, 1_000) stays quoted, as Kubernetes'
// own YAML library writes it.
func Marshal(v any) ([]byte, error) {
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(j, &doc); err != nil {
		return nil, fmt.Errorf("convert json to yaml: %w", err)
	}
	blockStyle(&doc)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	enc.CompactSeqIndent() // "- " under its key, as kubectl writes lists
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("write yaml: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("write yaml: %w", err)
	}
	return b.Bytes(), nil
}

// blockStyle clears the flow and quoting styles the JSON text gave the
// nodes, so the encoder writes block YAML and quotes only what needs it,
// but for strings that YAML 1.1 reads as booleans or numbers.
func blockStyle(n *yaml.Node) {
	n.Style = 0
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str" && yaml11NotString(n.Value) {
		n.Style = yaml.DoubleQuotedStyle
	}
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// yaml11NotString reports whether a plain scalar s would be read by a YAML
// 1.1 reader as a boolean or a number where YAML 1.2 reads a string: the
// words y, yes, n, no, on, off in their three spellings, and sexagesimal
// numbers (1:20). What YAML 1.2 reads as another type (1_000 too) the
// encoder quotes by itself.
func yaml11NotString(s string) bool {
	switch s {
	case "y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO",
		"on", "On", "ON", "off", "Off", "OFF":
		return true
	}
	return sexagesimal(s)
}

// sexagesimal reports a YAML 1.1 base-60 number: an optional sign, digits
// (and underscores), one or more :0-59 groups, an optional fraction of
// digits and underscores.
func sexagesimal(s string) bool {
	if s != "" && (s[0] == '+' || s[0] == '-') {
		s = s[1:]
	}
	s, frac, _ := strings.Cut(s, ".")
	if strings.Trim(frac, "0123456789_") != "" {
		return false
	}
	head, rest, ok := strings.Cut(s, ":")
	if !ok || head == "" || head[0] < '0' || head[0] > '9' || strings.Trim(head, "0123456789_") != "" {
		return false
	}
	for _, part := range strings.Split(rest, ":") {
		if part == "" || len(part) > 2 || strings.Trim(part, "0123456789") != "" || (len(part) == 2 && part[0] > '5') {
			return false
		}
	}
	return true
}
