package stream

import (
	"context"
	"errors"
)

// Source gives the records of an online source in its fixed order: a
// file's lines in file order (a directory's parts in name order), a Kafka
// topic's messages round robin over the partitions a reader takes, each
// partition's in offset order. The order depends only on what the source
// holds, never on when it arrived, so a source opened again at a Position
// gives the same records after it. It is opened at a position (OpenFile,
// kafka.Open; in this package's tests, NewMemory's Open).
type Source interface {
	// Next returns the next record, waiting until there is one; io.EOF
	// after the last one of a source that ends (standard input, a
	// directory not followed). The record is valid until the next call.
	// It returns ctx's error when ctx ends while it waits.
	Next(ctx context.Context) (*Record, error)
	// Where says where record r is, for a log line or an error:
	// "FILE:LINE", "kafka topic T partition 3 offset 42".
	Where(r *Record) string
	Close() error
}

// Lagger is a source that knows how far the end of its data is ahead of
// a position: a Kafka topic's messages behind the partitions' log ends.
type Lagger interface {
	// Lag is the number of messages after p; false while unknown.
	Lag(p *Position) (int64, bool)
}

// Skipper is a source whose round robin passes over idle partitions (a
// Kafka source: stream.Turns).
type Skipper interface {
	// IdleSkips is the number of turns passed over so far.
	IdleSkips() int64
}

// ErrStopped is what Reader.Fill returns when the run was asked to stop
// while it waited for rows.
var ErrStopped = errors.New("stopped while waiting for rows")
