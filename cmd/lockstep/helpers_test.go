package main

import (
	"encoding/json"
	"os/exec"
)

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func runOutput(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}
