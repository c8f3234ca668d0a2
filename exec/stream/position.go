package stream

import (
	"encoding/json"
	"fmt"
	"slices"
)

// Position is where a source's reader is: just after the records it
// consumed (good rows, bad rows skipped and other trainers' rows
// alike). A checkpoint holds it, as JSON, beside the model state of the
// same step, and a source opened at it gives the records after it.
type Position struct {
	Kind string `json:"kind"` // "kafka", "stdin", "file" or "dir"
	// A Kafka topic: the partitions this reader takes, in the order it
	// takes them, the next offset of each, and the index of the partition
	// whose message comes next (messages are taken round robin, one of
	// each partition in turn).
	Topic      string  `json:"topic,omitempty"`
	Partitions []int32 `json:"partitions,omitempty"`
	Offsets    []int64 `json:"offsets,omitempty"`
	Turn       int     `json:"turn,omitempty"`
	// A file, standard input or a directory's part: the file (a part's
	// name within its directory), the bytes and lines of it consumed, and
	// for standard input the CRC-32C of those bytes (a resumed run checks
	// that its input starts with them).
	File string `json:"file,omitempty"`
	Byte int64  `json:"byte,omitempty"`
	Line int64  `json:"line,omitempty"`
	CRC  uint32 `json:"crc,omitempty"`
	// Records consumed in all and, of them, bad rows skipped.
	Records int64 `json:"records"`
	Bad     int64 `json:"bad,omitempty"`
}

// Record is one record of a source: a row's bytes and where it is.
type Record struct {
	Value []byte // the row, its line end removed; valid until the next Next
	// Part is the index of the record's partition in Position.Partitions
	// (0 for a file); Off its offset in the partition, or for a file its
	// line number (from 1).
	Part int
	Off  int64
	// For a file: the file (a part's name), the byte just after the line,
	// and for standard input the CRC-32C of the bytes through it.
	File string
	End  int64
	CRC  uint32
}

// advance moves p past record r.
func (p *Position) advance(r *Record) {
	p.Records++
	if p.Kind == KindKafka {
		p.Offsets[r.Part] = r.Off + 1
		p.Turn = (r.Part + 1) % len(p.Offsets)
		return
	}
	p.File, p.Byte, p.Line, p.CRC = r.File, r.End, r.Off, r.CRC
}

// copyFrom makes p equal q, reusing p's memory.
func (p *Position) copyFrom(q *Position) {
	offs, parts := p.Offsets, p.Partitions
	*p = *q
	p.Offsets = append(offs[:0], q.Offsets...)
	if !slices.Equal(parts, q.Partitions) {
		parts = append(parts[:0], q.Partitions...)
	}
	p.Partitions = parts
}

// Clone is a copy of p sharing no memory with it.
func (p *Position) Clone() *Position {
	q := &Position{}
	q.copyFrom(p)
	q.Partitions = slices.Clone(p.Partitions)
	return q
}

// Source kinds.
const (
	KindKafka = "kafka"
	KindStdin = "stdin"
	KindFile  = "file"
	KindDir   = "dir"
)

// Marshal is p as the JSON a checkpoint's metadata holds.
func (p *Position) Marshal() string {
	b, _ := json.Marshal(p)
	return string(b)
}

// ParsePosition reads a position a checkpoint holds.
func ParsePosition(s string) (*Position, error) {
	p := &Position{}
	if err := json.Unmarshal([]byte(s), p); err != nil {
		return nil, fmt.Errorf("the stream position %q: %v", s, err)
	}
	switch p.Kind {
	case KindKafka:
		if len(p.Offsets) != len(p.Partitions) || len(p.Partitions) == 0 || p.Turn < 0 || p.Turn >= len(p.Partitions) {
			return nil, fmt.Errorf("the stream position %q is not a kafka position (partitions, offsets and turn disagree)", s)
		}
	case KindStdin, KindFile, KindDir:
	default:
		return nil, fmt.Errorf("the stream position %q has no known kind", s)
	}
	return p, nil
}

// String describes p for a log line.
func (p *Position) String() string {
	switch p.Kind {
	case KindKafka:
		s := fmt.Sprintf("topic %q", p.Topic)
		for i, part := range p.Partitions {
			s += fmt.Sprintf(" %d@%d", part, p.Offsets[i])
		}
		return s
	case KindStdin:
		return fmt.Sprintf("standard input byte %d (line %d)", p.Byte, p.Line)
	}
	if p.File == "" {
		return "the start"
	}
	return fmt.Sprintf("%s byte %d (line %d)", p.File, p.Byte, p.Line)
}
