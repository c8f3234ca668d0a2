package tfrecord

import (
	"bufio"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// MaskedCRC is TFRecord's checksum of b: its CRC-32C rotated right by 15
// bits plus 0xa282ead8.
func MaskedCRC(b []byte) uint32 {
	c := crc32.Checksum(b, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

// maxRecord bounds a record's length: a length past it is a corrupt file
// (or not a TFRecord file).
const maxRecord = 1 << 30

// Reader reads the records of a TFRecord file, gzip-compressed or not
// (told by the gzip magic bytes).
type Reader struct {
	r    *bufio.Reader
	buf  []byte
	skip int // the bytes of the last record, read in place, to discard
	// N is the number of records read.
	N int64
}

// NewReader reads records from r, buffered by br (reset onto r, or onto
// the gzip stream r holds).
func NewReader(r io.Reader, br *bufio.Reader) (*Reader, error) {
	br.Reset(r)
	magic, _ := br.Peek(2)
	if len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		z, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("a gzip stream that cannot be read: %w", err)
		}
		br = bufio.NewReaderSize(z, br.Size())
	}
	return &Reader{r: br}, nil
}

// ErrCorrupt is the error of a record whose framing or checksum is wrong.
var ErrCorrupt = errors.New("corrupt TFRecord")

// Next returns the next record's bytes, valid until the next call; io.EOF
// after the last. A record that fits the buffered reader's buffer is read
// in place, without a copy.
func (r *Reader) Next() ([]byte, error) {
	if r.skip > 0 { // the last record, read in place
		if _, err := r.r.Discard(r.skip); err != nil {
			return nil, err
		}
		r.skip = 0
	}
	head, err := r.r.Peek(12)
	if len(head) < 12 {
		if len(head) == 0 && err == io.EOF {
			return nil, io.EOF
		}
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("record %d: %w", r.N+1, err)
		}
		return nil, fmt.Errorf("record %d: the file ends inside its header: %w", r.N+1, ErrCorrupt)
	}
	n := binary.LittleEndian.Uint64(head[:8])
	if MaskedCRC(head[:8]) != binary.LittleEndian.Uint32(head[8:]) {
		return nil, fmt.Errorf("record %d: the checksum of its length does not match (is this a TFRecord file?): %w", r.N+1, ErrCorrupt)
	}
	if n > maxRecord {
		return nil, fmt.Errorf("record %d: length %d is past 1 GiB: %w", r.N+1, n, ErrCorrupt)
	}
	var b []byte
	if int(n)+16 <= r.r.Size() { // the header and the record, in place
		b, err = r.r.Peek(int(n) + 16)
		r.skip, b = len(b), b[min(12, len(b)):]
	} else {
		r.r.Discard(12)
		if uint64(cap(r.buf)) < n+4 {
			r.buf = make([]byte, n+4)
		}
		var m int
		m, err = io.ReadFull(r.r, r.buf[:n+4])
		b = r.buf[:m]
	}
	if len(b) < int(n)+4 {
		if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
			return nil, fmt.Errorf("record %d: %w", r.N+1, err)
		}
		return nil, fmt.Errorf("record %d: the file ends inside it: %w", r.N+1, ErrCorrupt)
	}
	rec := b[:n]
	if MaskedCRC(rec) != binary.LittleEndian.Uint32(b[n:]) {
		return nil, fmt.Errorf("record %d: the checksum of its data does not match: %w", r.N+1, ErrCorrupt)
	}
	r.N++
	return rec, nil
}

// Held is the bytes the reader holds besides its buffered reader.
func (r *Reader) Held() int { return cap(r.buf) }
