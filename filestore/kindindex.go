package filestore

import (
	"bytes"
	"encoding/json"
	"slices"
	"sync"

	"github.com/jobdir/jobdir/jobstore"
)

// kindIndex remembers the kind of the jobs this Store has seen, so that a
// List filtered by kind skips other kinds' records without reading them.
// A job's kind never changes and IDs are never reused, so an entry never
// goes stale; an entry of a pruned job is merely never asked for again.
// It is bounded: when full it starts over, and List then learns kinds
// again from record heads (see kindOf). It is safe for concurrent use.
type kindIndex struct {
	mu    sync.Mutex
	kinds map[string]uint16 // job ID -> index in names
	names []string
	index map[string]uint16 // kind -> index in names
}

// maxKindIndex bounds the jobs a kindIndex remembers: about 30 MB.
const maxKindIndex = 1 << 19

// get returns the kind of job id, if known.
func (x *kindIndex) get(id string) (string, bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	i, ok := x.kinds[id]
	if !ok {
		return "", false
	}
	return x.names[i], true
}

// dropOthers removes from ids the jobs known to be of another kind than
// kind, in place, and returns what is left.
func (x *kindIndex) dropOthers(ids []listed, kind string) []listed {
	x.mu.Lock()
	defer x.mu.Unlock()
	want, known := x.index[kind]
	return slices.DeleteFunc(ids, func(l listed) bool {
		i, ok := x.kinds[l.id]
		return ok && (!known || i != want)
	})
}

// put records that job id has kind.
func (x *kindIndex) put(id, kind string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if x.kinds == nil || len(x.kinds) >= maxKindIndex || len(x.names) >= 1<<16 {
		x.kinds = make(map[string]uint16)
		x.names = x.names[:0]
		x.index = make(map[string]uint16)
	}
	i, ok := x.index[kind]
	if !ok {
		i = uint16(len(x.names))
		x.names = append(x.names, kind)
		x.index[kind] = i
	}
	x.kinds[id] = i
}

// recordHead is how much of a record kindOf reads: enough for the
// envelope's format and rev and the job's id, key (at most
// jobstore.MaxKeyLen bytes, 6 when escaped) and kind, which the record
// holds before the payload.
const recordHead = 4 << 10

// kindOf returns the kind of job id, whose record is in state directory
// dir, from the index or else from the head of its record, without
// reading the payload. It reports false when it cannot tell (the record
// moved or is damaged); the caller then reads the record as usual. No lock
// is needed: every version of a record has the same kind.
func (s *Store) kindOf(dir, id string) (string, bool) {
	if kind, ok := s.kinds.get(id); ok {
		return kind, true
	}
	// At most recordHead bytes: the limit and the one byte more.
	head, typ, err := readRegular(s.recordPath(dir, id), recordHead-1)
	if err != nil || typ != 0 {
		return "", false
	}
	kind, ok := headKind(head, id)
	if ok {
		s.kinds.put(id, kind)
	}
	return kind, ok
}

// headKind finds job.kind in the head of a record, as written by
// json.Marshal of an envelope. It reports false if the head does not hold
// it before the payload, names another job, or holds an invalid kind.
func headKind(head []byte, id string) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(head))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return "", false
	}
	for dec.More() {
		name, err := dec.Token()
		if err != nil {
			return "", false
		}
		if name != "job" {
			var skip json.RawMessage
			if dec.Decode(&skip) != nil {
				return "", false
			}
			continue
		}
		if t, err := dec.Token(); err != nil || t != json.Delim('{') {
			return "", false
		}
		seenID := false
		for dec.More() {
			field, err := dec.Token()
			if err != nil {
				return "", false
			}
			v, err := dec.Token()
			if err != nil {
				return "", false
			}
			str, isString := v.(string)
			switch {
			case !isString:
				return "", false // the payload or a later field: kind was not first
			case field == "id":
				if str != id {
					return "", false
				}
				seenID = true
			case field == "kind":
				// A kind the store would not have written is left to a
				// full read, which reports the record as corrupt.
				return str, seenID && jobstore.ValidateKind(str) == nil
			}
		}
		return "", false
	}
	return "", false
}
