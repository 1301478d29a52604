package benchkit

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Section is the part of a benchmarks file one tool owns: everything from
// its begin marker to its end marker, rewritten in place on every run so
// the sections of other tools and the prose around them survive.
type Section struct {
	// Tool names the markers: <!-- Tool:begin --> and <!-- Tool:end -->.
	Tool string
	// After is the tool whose section this one follows when it is first
	// inserted; empty, or a file without that section, appends it.
	After string
	// Intro starts the file when the file is missing or empty.
	Intro string
}

// Begin is the marker that opens s.
func (s Section) Begin() string { return "<!-- " + s.Tool + ":begin -->" }

// End is the marker that closes s.
func (s Section) End() string { return "<!-- " + s.Tool + ":end -->" }

// Splice returns old with s replaced by text, which must carry both
// markers. It refuses a file whose markers are broken rather than guess
// what lies between them.
func (s Section) Splice(old []byte, text string) ([]byte, error) {
	if len(bytes.TrimSpace(old)) == 0 {
		if s.Intro == "" {
			return []byte(text), nil
		}
		return []byte(s.Intro + "\n" + text), nil
	}
	begin := bytes.Index(old, []byte(s.Begin()))
	end := bytes.Index(old, []byte(s.End()))
	switch {
	case begin < 0 && end < 0:
		return s.insert(old, text), nil
	case begin < 0 || end < begin:
		return nil, fmt.Errorf("the markers %s and %s are missing or out of order; fix them by hand (or delete the broken section) and rerun", s.Begin(), s.End())
	}
	return replaceLine(old, begin, end+len(s.End()), text), nil
}

// insert places text after the After tool's section, or at the end.
func (s Section) insert(old []byte, text string) []byte {
	if s.After != "" {
		if at := bytes.Index(old, []byte(Section{Tool: s.After}.End())); at >= 0 {
			at += len(Section{Tool: s.After}.End())
			if at < len(old) && old[at] == '\n' {
				at++
			}
			return replaceLine(old, at, at, "\n"+text)
		}
	}
	out := bytes.TrimRight(old, "\n")
	return append(append(out, "\n\n"...), text...)
}

// replaceLine returns old with old[from:to] replaced by text, eating the
// newline that ends the replaced part.
func replaceLine(old []byte, from, to int, text string) []byte {
	if to > from && to < len(old) && old[to] == '\n' {
		to++
	}
	out := make([]byte, 0, len(old)+len(text))
	out = append(out, old[:from]...)
	out = append(out, text...)
	return append(out, old[to:]...)
}

// Write puts text into the file at path as s (Splice), replacing the file
// atomically, or prints text to stdout when path is empty.
func (s Section) Write(path, text string, stdout io.Writer) error {
	if path == "" {
		_, err := io.WriteString(stdout, text)
		return err
	}
	old, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	updated, err := s.Splice(old, text)
	if err != nil {
		return fmt.Errorf("update %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+s.Tool+"-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(updated)
	if err == nil {
		err = tmp.Chmod(0o644)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
