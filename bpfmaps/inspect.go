package bpfmaps

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/cilium/ebpf"
)

// Errors callers can test for with errors.Is.
var (
	// ErrNotPinned: nothing is pinned under the pin root. Is the agent
	// running, and is --bpf-root its pin root?
	ErrNotPinned = errors.New("no lockstep maps pinned")
	// ErrUnknownMap: the name is not one of Names.
	ErrUnknownMap = errors.New("unknown map")
	// ErrNotDumpable: the map has no entries to list (the event ring
	// buffer: use `lockstep monitor`).
	ErrNotDumpable = errors.New("map cannot be dumped")
	// ErrBadEvent: a lockstep_events record is not an Event of this
	// lockstep (programs of another version wrote it, before an upgrade
	// replaced them). Skip it: the records after it may well decode.
	ErrBadEvent = errors.New("undecodable verdict event")
)

// MapInfo describes one pinned map.
type MapInfo struct {
	Name       string `json:"name"`
	Type       string `json:"type"`
	KeySize    uint32 `json:"key_size"`
	ValueSize  uint32 `json:"value_size"`
	MaxEntries uint32 `json:"max_entries"`
	// Entries is the number of keys, -1 for maps without keys (ring
	// buffers).
	Entries int `json:"entries"`
}

// Entry is one decoded key/value pair of a map. Key and Value hold the
// Go twins of the C structs (or a small view of them), ready for JSON.
type Entry struct {
	Key   any `json:"key"`
	Value any `json:"value"`
}

// List describes every lockstep map pinned under pinRoot, in Names order.
func List(pinRoot string) ([]MapInfo, error) {
	var out []MapInfo
	for _, name := range Names {
		m, err := openPinned(pinRoot, name)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		info := MapInfo{
			Name:       name,
			Type:       m.Type().String(),
			KeySize:    m.KeySize(),
			ValueSize:  m.ValueSize(),
			MaxEntries: m.MaxEntries(),
			Entries:    -1,
		}
		if m.Type() != ebpf.RingBuf {
			info.Entries, err = Count(m)
		}
		m.Close()
		if err != nil {
			return nil, fmt.Errorf("count %s: %w", name, err)
		}
		out = append(out, info)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("list %s: %w", pinRoot, ErrNotPinned)
	}
	return out, nil
}

// Count returns the number of keys of m by walking them.
func Count(m *ebpf.Map) (int, error) {
	n := 0
	var prev any
	for {
		k, err := m.NextKeyBytes(prev)
		if err != nil {
			return n, err
		}
		if k == nil {
			return n, nil
		}
		n++
		prev = k
	}
}

func openPinned(pinRoot, name string) (*ebpf.Map, error) {
	path := filepath.Join(pinRoot, name)
	m, err := ebpf.LoadPinnedMap(path, &ebpf.LoadPinOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("open pinned map %s: %w", path, err)
	}
	return m, nil
}

// PolicyEntries is the decoded value of a lockstep_policy entry: the
// inner map's id and its rules.
type PolicyEntries struct {
	InnerMapID uint32       `json:"inner_map_id"`
	Rules      []PolicyRule `json:"rules"`
}

// PolicyRule is one entry of an inner policy map, with only the used
// port ranges.
type PolicyRule struct {
	Peer   uint32      `json:"peer"`
	Dir    string      `json:"dir"`
	Proto  string      `json:"proto"`
	Ranges []PortRange `json:"ranges,omitempty"`
}

// Dump decodes every entry of the map name pinned under pinRoot.
// Per-CPU counters are summed; lockstep_policy's values are expanded into
// the rules of their inner maps.
func Dump(pinRoot, name string) ([]Entry, error) {
	if !slices.Contains(Names, name) {
		return nil, fmt.Errorf("dump %s: %w (known: %v)", name, ErrUnknownMap, Names)
	}
	if name == EventsMap {
		return nil, fmt.Errorf("dump %s: %w", name, ErrNotDumpable)
	}
	m, err := openPinned(pinRoot, name)
	if err != nil {
		return nil, err
	}
	defer m.Close()
	var out []Entry
	switch name {
	case StateMap:
		out, err = dumpAll[uint32, State](m)
	case MonitorMap:
		out, err = dumpAll[uint32, uint32](m)
	case EndpointsMap:
		out, err = dumpAll[uint32, EndpointInfo](m)
	case IPCacheMap:
		out, err = dumpAll[Addr, IPCacheValue](m)
	case CIDRsMap:
		out, err = dumpAll[CIDRKey, CIDRValue](m)
	case CTMap:
		out, err = dumpAll[CTKey, CTEntry](m)
	case ServicesMap:
		out, err = dumpAll[SvcKey, SvcValue](m)
	case BackendsMap:
		out, err = dumpAll[BackendKey, BackendValue](m)
	case SvcCTMap:
		out, err = dumpAll[CTKey, SvcCTEntry](m)
	case AffinityMap:
		out, err = dumpAll[AffinityKey, AffinityValue](m)
	case CTCacheMap:
		out, err = dumpCTCache(m)
	case CTEpochMap:
		out, err = dumpAll[uint32, uint32](m)
	case CTShareMap:
		out, err = dumpAll[uint32, CTShare](m)
	case CTReleasedMap:
		out, err = dumpAll[uint32, uint64](m)
	case CTInsertedMap:
		out, err = dumpCTInserted(m)
	case CTEvictionsMap:
		out, err = dumpCTEvictions(m)
	case CountersMap:
		out, err = dumpCounters(m)
	case PolicyMap:
		out, err = dumpPolicy(m)
	case UplinksMap:
		out, err = dumpAll[uint32, uint32](m)
	case RoutedSYNMap:
		out, err = dumpAll[uint32, []CTKey](m)
	}
	if err != nil {
		return nil, fmt.Errorf("dump %s: %w", name, err)
	}
	return out, nil
}

func dumpAll[K, V any](m *ebpf.Map) ([]Entry, error) {
	var out []Entry
	var k K
	var v V
	it := m.Iterate()
	for it.Next(&k, &v) {
		out = append(out, Entry{Key: k, Value: v})
	}
	return out, it.Err()
}

func dumpCounters(m *ebpf.Map) ([]Entry, error) {
	var out []Entry
	for i := range uint32(m.MaxEntries()) {
		var perCPU []Counter
		if err := m.Lookup(i, &perCPU); err != nil {
			return nil, err
		}
		var sum Counter
		for _, c := range perCPU {
			sum.Packets += c.Packets
			sum.Bytes += c.Bytes
		}
		if Reason(i).String() == fmt.Sprintf("reason-%d", i) && sum == (Counter{}) {
			continue // unused slot
		}
		out = append(out, Entry{Key: Reason(i), Value: sum})
	}
	return out, nil
}

// dumpCTInserted lists, by the name of the conntrack table it counts, the
// entries the programs added to it, summed over the CPUs.
func dumpCTInserted(m *ebpf.Map) ([]Entry, error) {
	var out []Entry
	for i, table := range CTTableMaps {
		var perCPU []uint64
		if err := m.Lookup(uint32(i), &perCPU); err != nil {
			return nil, err
		}
		var sum uint64
		for _, n := range perCPU {
			sum += n
		}
		out = append(out, Entry{Key: table, Value: sum})
	}
	return out, nil
}

// dumpCTEvictions lists the eviction account of each conntrack table, by
// the table's name.
func dumpCTEvictions(m *ebpf.Map) ([]Entry, error) {
	var out []Entry
	for i, table := range CTTableMaps {
		var v CTEvictions
		if err := m.Lookup(uint32(i), &v); err != nil {
			return nil, err
		}
		out = append(out, Entry{Key: table, Value: v})
	}
	return out, nil
}

// dumpCTCache lists the slots of every CPU's flow cache that are not
// empty, whether still valid or not.
func dumpCTCache(m *ebpf.Map) ([]Entry, error) {
	var out []Entry
	for i := range uint32(m.MaxEntries()) {
		var perCPU []CTCacheSlot
		if err := m.Lookup(i, &perCPU); err != nil {
			return nil, err
		}
		for cpu, s := range perCPU {
			if s != (CTCacheSlot{}) {
				out = append(out, Entry{Key: CTCacheKey{CPU: cpu, Slot: i}, Value: s})
			}
		}
	}
	return out, nil
}

func dumpPolicy(outer *ebpf.Map) ([]Entry, error) {
	var out []Entry
	var k PolicyOuterKey
	var id uint32
	it := outer.Iterate()
	for it.Next(&k, &id) {
		v := PolicyEntries{InnerMapID: id}
		inner, err := ebpf.NewMapFromID(ebpf.MapID(id))
		if err != nil {
			return nil, fmt.Errorf("open inner map %d: %w", id, err)
		}
		var pk PolicyKey
		var pv PolicyValue
		chunks := map[PolicyKey]map[uint16][]PortRange{} // by chunk 0's key
		iit := inner.Iterate()
		for iit.Next(&pk, &pv) {
			c := pk.Chunk
			pk.Chunk = 0
			if chunks[pk] == nil {
				chunks[pk] = map[uint16][]PortRange{}
			}
			chunks[pk][c] = slices.Clone(pv.Ranges[:min(pv.NRanges&0xffff, MaxPortRanges)])
		}
		for pk, cs := range chunks {
			r := PolicyRule{Peer: pk.Peer, Dir: DirString(pk.Dir), Proto: ProtoString(pk.Proto)}
			if pk.Proto != 0 {
				r.Ranges = joinBuckets(cs)
			}
			v.Rules = append(v.Rules, r)
		}
		inner.Close()
		if err := iit.Err(); err != nil {
			return nil, fmt.Errorf("read inner map %d: %w", id, err)
		}
		out = append(out, Entry{Key: k, Value: v})
	}
	return out, it.Err()
}

// DecodeEvent decodes one lockstep_events record.
func DecodeEvent(raw []byte) (Event, error) {
	var e Event
	if _, err := binary.Decode(raw, binary.LittleEndian, &e); err != nil {
		return Event{}, fmt.Errorf("decode event of %d bytes: %w: %w", len(raw), ErrBadEvent, err)
	}
	return e, nil
}

// joinBuckets returns a rule's ranges from its chunks: chunk 0's, and
// those of a bucketed rule's buckets in order, the pieces of a range that
// spans buckets joined again.
func joinBuckets(cs map[uint16][]PortRange) []PortRange {
	out := cs[0]
	for _, c := range slices.Sorted(maps.Keys(cs)) {
		if c == 0 {
			continue
		}
		for _, r := range cs[c] {
			if n := len(out); n > 0 && uint32(out[n-1].Hi)+1 == uint32(r.Lo) {
				out[n-1].Hi = r.Hi
				continue
			}
			out = append(out, r)
		}
	}
	return out
}
