package persist

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"slices"
)

// bbolt trusts its file: a page id beyond the end of the file, a page of
// the wrong kind or an element that points outside its page makes it
// panic, loop or die of SIGBUS, in reads and in writes alike. So before
// bbolt maps a state file, checkPages reads every page the file's last
// commit can reach with plain reads and checks each against bbolt's
// on-disk format (version 2): the constants below mirror that format's
// page header, meta page, branch and leaf elements and bucket header.
const (
	boltMagic        = 0xED0CDAED
	boltVersion      = 2
	pageHeaderSize   = 16
	elementSize      = 16 // a branch or leaf element
	bucketHeaderSize = 16
	metaSize         = 64 // up to and including the checksum
	metaChecksumAt   = 56
	pageFlagBranch   = 0x01
	pageFlagLeaf     = 0x02
	pageFlagFreelist = 0x10
	leafFlagBucket   = 0x01
	noFreelist       = ^uint64(0)
)

var native = binary.NativeEndian

// boltMeta is the part of a bbolt meta page checkPages needs.
type boltMeta struct {
	pageSize                   uint64
	root, freelist, pgid, txid uint64
}

// parseMeta decodes the meta page at the start of page, or reports that it
// is not a valid one (bad magic, version or checksum).
func parseMeta(page []byte) (boltMeta, bool) {
	if len(page) < pageHeaderSize+metaSize {
		return boltMeta{}, false
	}
	m := page[pageHeaderSize:]
	if native.Uint32(m[0:]) != boltMagic || native.Uint32(m[4:]) != boltVersion {
		return boltMeta{}, false
	}
	h := fnv.New64a()
	h.Write(m[:metaChecksumAt])
	if h.Sum64() != native.Uint64(m[metaChecksumAt:]) {
		return boltMeta{}, false
	}
	return boltMeta{
		pageSize: uint64(native.Uint32(m[8:])),
		root:     native.Uint64(m[16:]), freelist: native.Uint64(m[32:]), pgid: native.Uint64(m[40:]), txid: native.Uint64(m[48:]),
	}, true
}

// readAt reads len(buf) bytes at off, or reports that the file ends first.
func readAt(f io.ReaderAt, buf []byte, off int64) bool {
	n, err := f.ReadAt(buf, off)
	return n == len(buf) && (err == nil || errors.Is(err, io.EOF))
}

// checkPages checks the file f of size bytes as bbolt will read it. A file
// that ends before the high-water mark of the meta page bbolt will use is
// truncated, and so is one without a valid meta page that starts like a
// bbolt file and is shorter than two pages; any other damage is corrupt.
func checkPages(path string, f io.ReaderAt, size int64) error {
	head := make([]byte, pageHeaderSize+metaSize)
	n, _ := f.ReadAt(head, 0)
	head = head[:n]
	boltLike := len(head) >= pageHeaderSize+4 && native.Uint32(head[pageHeaderSize:]) == boltMagic
	var metas []boltMeta
	pageSize := uint64(os.Getpagesize())
	if m, ok := parseMeta(head); ok {
		metas, pageSize = append(metas, m), m.pageSize
	}
	// The second meta page sits one page in; without a valid first one
	// the page size is unknown, so try the sizes bbolt tries.
	sizes := []uint64{pageSize}
	if len(metas) == 0 {
		for i := range 15 {
			sizes = append(sizes, 1024<<i)
		}
	}
	for _, ps := range sizes {
		buf := make([]byte, pageHeaderSize+metaSize)
		if !readAt(f, buf, int64(ps)) {
			continue
		}
		if m, ok := parseMeta(buf); ok && m.pageSize == ps {
			metas = append(metas, m)
			break
		}
	}
	switch {
	case len(metas) == 0 && boltLike && size < 2*int64(pageSize):
		return truncated(path, size, 2*int64(pageSize))
	case len(metas) == 0 && boltLike:
		return corrupt(path, errors.New("both bbolt meta pages are invalid"))
	case len(metas) == 0:
		return corrupt(path, errors.New("not a bbolt file"))
	}
	// bbolt uses the valid meta page of the later transaction.
	m := slices.MaxFunc(metas, func(a, b boltMeta) int { return cmp.Compare(a.txid, b.txid) })
	if m.pageSize < 1024 || m.pageSize > 1<<24 || m.pageSize&(m.pageSize-1) != 0 {
		return corrupt(path, fmt.Errorf("meta page names page size %d", m.pageSize))
	}
	if m.pgid < 4 || m.pgid > uint64(1<<40)/m.pageSize {
		return corrupt(path, fmt.Errorf("meta page names %d pages", m.pgid))
	}
	if want := int64(m.pgid * m.pageSize); size < want {
		return truncated(path, size, want)
	}
	w := &pageWalker{f: f, m: m, seen: make(map[uint64]bool)}
	switch err := w.walk(); {
	case errors.Is(err, errNoFreelist):
		return foreign(path, "it was written without a freelist, which lockstep never does")
	case err != nil:
		return corrupt(path, err)
	}
	return nil
}

// errNoFreelist is walk's error for a file whose meta page names no
// freelist page.
var errNoFreelist = errors.New("no freelist page")

// pageWalker visits the pages of one bbolt file, each at most once.
type pageWalker struct {
	f    io.ReaderAt
	m    boltMeta
	seen map[uint64]bool
}

// walk checks every page reachable from the root bucket, then the
// freelist: a free page must exist and must not be in use, or bbolt would
// hand it out while it still holds data.
func (w *pageWalker) walk() error {
	todo := []uint64{w.m.root}
	for len(todo) > 0 {
		id := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		page, err := w.page(id, pageFlagBranch|pageFlagLeaf)
		if err != nil {
			return err
		}
		children, err := elements(page, int64(id))
		if err != nil {
			return err
		}
		todo = append(todo, children...)
	}
	if w.m.freelist == noFreelist {
		// bbolt would rebuild the freelist by walking the file in a
		// goroutine of its own, where a panic cannot be recovered; and
		// lockstep always writes its freelist.
		return errNoFreelist
	}
	page, err := w.page(w.m.freelist, pageFlagFreelist)
	if err != nil {
		return err
	}
	start, count := uint64(pageHeaderSize), uint64(native.Uint16(page[10:]))
	if count == 0xFFFF {
		if len(page) < pageHeaderSize+8 {
			return fmt.Errorf("freelist page %d is too short", w.m.freelist)
		}
		start, count = pageHeaderSize+8, native.Uint64(page[pageHeaderSize:])
	}
	if count > (uint64(len(page))-start)/8 {
		return fmt.Errorf("freelist page %d lists %d pages, more than it holds", w.m.freelist, count)
	}
	for i := range count {
		id := native.Uint64(page[start+8*i:])
		if id < 2 || id >= w.m.pgid || w.seen[id] {
			return fmt.Errorf("freelist page %d frees page %d, which is a meta page, in use, listed twice or past the high-water mark %d", w.m.freelist, id, w.m.pgid)
		}
		w.seen[id] = true
	}
	return nil
}

// page reads page id and its overflow pages, checking that they are
// below the high-water mark, seen for the first time, and that the page
// is of a kind in flags and names itself.
func (w *pageWalker) page(id uint64, flags uint16) ([]byte, error) {
	if id < 2 || id >= w.m.pgid {
		return nil, fmt.Errorf("page %d is outside pages 2..%d", id, w.m.pgid-1)
	}
	hdr := make([]byte, pageHeaderSize)
	if !readAt(w.f, hdr, int64(id*w.m.pageSize)) {
		return nil, fmt.Errorf("page %d cannot be read", id)
	}
	if got := native.Uint64(hdr); got != id {
		return nil, fmt.Errorf("page %d names itself page %d", id, got)
	}
	if got := native.Uint16(hdr[8:]); got&flags == 0 || got&^flags != 0 || got == pageFlagBranch|pageFlagLeaf {
		return nil, fmt.Errorf("page %d has flags %#x", id, got)
	}
	overflow := uint64(native.Uint32(hdr[12:]))
	if overflow >= w.m.pgid-id {
		return nil, fmt.Errorf("page %d runs %d pages past the high-water mark %d", id, overflow, w.m.pgid)
	}
	for i := id; i <= id+overflow; i++ {
		if w.seen[i] {
			return nil, fmt.Errorf("page %d is referenced twice", i)
		}
		w.seen[i] = true
	}
	page := make([]byte, (overflow+1)*w.m.pageSize)
	if !readAt(w.f, page, int64(id*w.m.pageSize)) {
		return nil, fmt.Errorf("page %d cannot be read", id)
	}
	return page, nil
}

// elements checks the elements of a branch or leaf page (its keys within
// the page and in order, and a branch's children) and returns the pages
// it points to: a branch's children and the root pages of the buckets a
// leaf holds. id names the page in errors; an inline bucket's page, which
// lives in its parent's value, is checked the same way.
func elements(page []byte, id int64) ([]uint64, error) {
	count := int(native.Uint16(page[10:]))
	branch := native.Uint16(page[8:])&pageFlagBranch != 0
	if branch && count == 0 {
		return nil, fmt.Errorf("branch page %d is empty", id)
	}
	if pageHeaderSize+count*elementSize > len(page) {
		return nil, fmt.Errorf("page %d holds %d elements, more than fit", id, count)
	}
	var out []uint64
	var prev []byte
	for i := range count {
		at := pageHeaderSize + i*elementSize
		e := page[at : at+elementSize]
		var pos, ksize, vsize uint64
		if branch {
			pos, ksize = uint64(native.Uint32(e[0:])), uint64(native.Uint32(e[4:]))
		} else {
			pos, ksize, vsize = uint64(native.Uint32(e[4:])), uint64(native.Uint32(e[8:])), uint64(native.Uint32(e[12:]))
		}
		if uint64(at)+pos+ksize+vsize > uint64(len(page)) {
			return nil, fmt.Errorf("page %d element %d points past the page", id, i)
		}
		key := page[uint64(at)+pos : uint64(at)+pos+ksize]
		if i > 0 && bytes.Compare(prev, key) >= 0 {
			return nil, fmt.Errorf("page %d keys out of order at element %d", id, i)
		}
		prev = key
		if branch {
			out = append(out, native.Uint64(e[8:]))
			continue
		}
		if native.Uint32(e[0:])&leafFlagBucket == 0 {
			continue
		}
		value := page[uint64(at)+pos+ksize : uint64(at)+pos+ksize+vsize]
		if len(value) < bucketHeaderSize {
			return nil, fmt.Errorf("page %d element %d is a bucket without a header", id, i)
		}
		if root := native.Uint64(value); root != 0 {
			out = append(out, root)
			continue
		}
		inline := value[bucketHeaderSize:]
		if len(inline) < pageHeaderSize || native.Uint16(inline[8:]) != pageFlagLeaf {
			return nil, fmt.Errorf("page %d element %d holds an inline bucket that is not a leaf page", id, i)
		}
		children, err := elements(inline, id)
		if err != nil {
			return nil, err
		}
		out = append(out, children...)
	}
	return out, nil
}
