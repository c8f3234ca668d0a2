package stream

import (
	"context"
	"fmt"
	"io"
	"sync"
)

// Memory is the in-memory twin of a source: partitions of rows appended
// as a test goes (Append), read through sources opened at a position
// (Open) round robin over the partitions, as a Kafka topic is; with one
// partition and kind file it numbers lines and bytes as a file does.
// End makes its sources end (io.EOF) after the last row.
type Memory struct {
	kind   string
	mu     sync.Mutex
	parts  [][]string
	ended  bool
	change chan struct{} // closed and replaced at every Append and End
}

// NewMemory is an empty Memory of kind KindKafka (partitions > 0) or
// KindFile (one partition).
func NewMemory(kind string, partitions int) *Memory {
	return &Memory{kind: kind, parts: make([][]string, partitions), change: make(chan struct{})}
}

// Append adds rows to a partition.
func (m *Memory) Append(part int, rows ...string) {
	m.mu.Lock()
	m.parts[part] = append(m.parts[part], rows...)
	close(m.change)
	m.change = make(chan struct{})
	m.mu.Unlock()
}

// End makes the sources end after the rows appended so far.
func (m *Memory) End() {
	m.mu.Lock()
	m.ended = true
	close(m.change)
	m.change = make(chan struct{})
	m.mu.Unlock()
}

// Start is the position of a source's first record.
func (m *Memory) Start() *Position {
	p := &Position{Kind: m.kind}
	if m.kind == KindKafka {
		p.Topic = "memory"
		for i := range m.parts {
			p.Partitions = append(p.Partitions, int32(i))
			p.Offsets = append(p.Offsets, 0)
		}
	}
	return p
}

// Open is a source of m's rows after position p.
func (m *Memory) Open(p *Position) (Source, error) {
	if p.Kind != m.kind || (m.kind == KindKafka && len(p.Offsets) != len(m.parts)) {
		return nil, fmt.Errorf("position %s is not one of this memory source", p)
	}
	return &memorySource{m: m, pos: p.Clone()}, nil
}

type memorySource struct {
	m   *Memory
	pos *Position
	rec Record
}

func (s *memorySource) Next(ctx context.Context) (*Record, error) {
	for {
		s.m.mu.Lock()
		part, off := 0, s.pos.Line
		if s.m.kind == KindKafka {
			part = s.pos.Turn
			off = s.pos.Offsets[part]
		}
		rows, ended, change := s.m.parts[part], s.m.ended, s.m.change
		s.m.mu.Unlock()
		if off < int64(len(rows)) {
			s.rec = Record{Value: []byte(rows[off]), Part: part, Off: off}
			if s.m.kind != KindKafka {
				s.rec = Record{Value: []byte(rows[off]), Off: off + 1, File: "memory", End: s.pos.Byte + int64(len(rows[off])) + 1}
			}
			s.pos.advance(&s.rec)
			return &s.rec, nil
		}
		if ended {
			return nil, io.EOF
		}
		select {
		case <-change:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (s *memorySource) Where(r *Record) string {
	if s.m.kind == KindKafka {
		return fmt.Sprintf("memory partition %d offset %d", r.Part, r.Off)
	}
	return fmt.Sprintf("memory:%d", r.Off)
}

func (s *memorySource) Close() error { return nil }

// Lag is the rows appended after p.
func (s *memorySource) Lag(p *Position) (int64, bool) {
	s.m.mu.Lock()
	defer s.m.mu.Unlock()
	var n int64
	for i, rows := range s.m.parts {
		if s.m.kind == KindKafka {
			n += int64(len(rows)) - p.Offsets[i]
		} else {
			n += int64(len(rows)) - p.Line
		}
	}
	return n, true
}
