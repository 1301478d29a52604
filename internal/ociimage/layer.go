package ociimage

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"time"
)

// writeLayer writes the sorted entries of tree as one uncompressed layer.
// Every header carries the same mtime, uid and gid 0 and no user or group
// names, so the bytes depend on the entries alone.
func writeLayer(w io.Writer, entries []Entry, mtime time.Time) error {
	tw := tar.NewWriter(w)
	for _, e := range entries {
		if err := writeEntry(tw, e, mtime); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("finish the layer: %w", err)
	}
	return nil
}

// writeEntry writes one header and, for a regular file, its content.
func writeEntry(tw *tar.Writer, e Entry, mtime time.Time) error {
	hdr := &tar.Header{
		Name:    e.Path,
		Mode:    tarMode(e.Mode),
		ModTime: mtime,
		Format:  tar.FormatPAX,
	}
	var content io.Reader
	switch {
	case e.IsDir():
		hdr.Typeflag = tar.TypeDir
		hdr.Name += "/"
	case e.IsSymlink():
		hdr.Typeflag = tar.TypeSymlink
		hdr.Linkname = e.Target
	default:
		hdr.Typeflag = tar.TypeReg
		r, size, closeFn, err := openContent(e)
		if err != nil {
			return err
		}
		defer closeFn()
		hdr.Size, content = size, r
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return fmt.Errorf("write layer header for /%s: %w", e.Path, err)
	}
	if content != nil {
		if _, err := io.Copy(tw, content); err != nil {
			return fmt.Errorf("write /%s into the layer: %w", e.Path, err)
		}
	}
	return nil
}

// openContent returns a regular file's content and size: Data, or the host
// file Source read as it is now. A source that changes size while it is
// copied makes the tar writer fail rather than write a torn file.
func openContent(e Entry) (io.Reader, int64, func(), error) {
	if e.Source == "" {
		return bytes.NewReader(e.Data), int64(len(e.Data)), func() {}, nil
	}
	f, err := os.Open(e.Source)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("read /%s from %s: %w", e.Path, e.Source, err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, nil, fmt.Errorf("read /%s from %s: %w", e.Path, e.Source, err)
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, 0, nil, fmt.Errorf("read /%s from %s: %w: not a regular file", e.Path, e.Source, ErrInvalidEntry)
	}
	return f, fi.Size(), func() { f.Close() }, nil
}

// tarMode turns a FileMode's permission and special bits into tar's
// (c_ISUID, c_ISGID, c_ISVTX and the rwx bits).
func tarMode(m fs.FileMode) int64 {
	mode := int64(m.Perm())
	if m&fs.ModeSetuid != 0 {
		mode |= 0o4000
	}
	if m&fs.ModeSetgid != 0 {
		mode |= 0o2000
	}
	if m&fs.ModeSticky != 0 {
		mode |= 0o1000
	}
	return mode
}
