// Package yamljson converts between YAML and JSON, so that YAML is read and
// written through the json tags of Go types, as Kubernetes tools do.
//
// It parses YAML under YAML 1.2's core schema (go.yaml.in/yaml/v3): only
// true and false are booleans, so label values such as `y`, `on` or `no`
// stay the strings their authors wrote. Duplicate keys are an error.
package yamljson

import (
	"encoding/json"
	"fmt"

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

// Marshal writes v as a block-style YAML document with the fields and
// values its JSON has (JSON is YAML, so its scalars are kept exactly).
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
	return yaml.Marshal(&doc)
}

// blockStyle clears the flow and quoting styles the JSON text gave the
// nodes, so the encoder writes block YAML and quotes only what needs it.
func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
}
