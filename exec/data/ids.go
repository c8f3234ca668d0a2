package data

import (
	"bytes"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ir"
)

// parseIDs reads the fields of ids spec s (the j-th) into out.
func (p *rowParser) parseIDs(s *idSpec, j, lineNo int, out *rowOut) error {
	var err error
	switch {
	case s.c.MaxLen > 0:
		return p.multi(s, j, lineNo, out.ids[j], out.keys[j])
	case s.kind == idsBuckets:
		seeds, out, buckets := s.seeds, out.ids[j], s.buckets
		for k, col := range s.c.Cols {
			if p.hashed != nil && p.hashed[col].ok {
				out[k] = bucketOf(p.hashed[col].h, buckets)
				continue
			}
			out[k] = bucketOf(hashKey(seeds[k], p.fields[col]), buckets)
		}
	case s.kind == keysHash64:
		seeds, out := s.seeds, out.keys[j]
		for k, col := range s.c.Cols {
			if p.hashed != nil && p.hashed[col].ok {
				out[k] = ir.HashKey(p.hashed[col].h)
				continue
			}
			out[k] = ir.HashKey(hashKey(seeds[k], p.fields[col]))
		}
	case s.kind == keysInt64 || s.kind == keysUint64:
		out := out.keys[j]
		for k, col := range s.c.Cols {
			if out[k], err = p.key(s, p.fields[col], col, lineNo); err != nil {
				return err
			}
		}
	case s.kind == idsVocab:
		out := out.ids[j]
		for k, col := range s.c.Cols {
			if out[k], err = p.vocabID(s, k, p.fields[col], col, lineNo); err != nil {
				return err
			}
		}
	default:
		out := out.ids[j]
		for k, col := range s.c.Cols {
			if out[k], err = p.id(s, p.fields[col], col, lineNo); err != nil {
				return err
			}
		}
	}
	return nil
}

// id reads an integer id field f (of column col) of ids spec s, checked
// against its num_ids.
func (p *rowParser) id(s *idSpec, f []byte, col, lineNo int) (int32, error) {
	v, err := p.integer(s.c, f, col, lineNo, "ids")
	if err == nil && s.bound > 0 && int(v) >= s.bound {
		err = p.errAt(lineNo, "%s: id %d is not below num_ids %d of %s %q (%s); fix the row or raise num_ids (and the rows of the tables it reads)", p.colName(col), v, s.bound, s.c.Key(), s.c.Name, s.c.Pos)
	}
	return v, err
}

// pieceIter walks the values of a multi-valued column: the pieces of a
// text field between separators, or a list a tfrecord or parquet reader
// gave. Empty values hold no id.
type pieceIter struct {
	rest   []byte
	sep    byte
	list   [][]byte
	isList bool
}

// pieces walks the values of column col.
func (p *rowParser) pieces(col int, sep byte) pieceIter {
	if p.lists != nil && p.lists[col] != nil {
		return pieceIter{list: p.lists[col], isList: true}
	}
	if sep == 0 { // one value
		return pieceIter{list: p.fields[col : col+1], isList: true}
	}
	return pieceIter{rest: p.fields[col], sep: sep}
}

func (it *pieceIter) next() ([]byte, bool) {
	for {
		var piece []byte
		if it.isList {
			if len(it.list) == 0 {
				return nil, false
			}
			piece, it.list = it.list[0], it.list[1:]
		} else {
			if len(it.rest) == 0 {
				return nil, false
			}
			piece, it.rest = nextPiece(it.rest, it.sep)
		}
		if len(piece) > 0 {
			return piece, true
		}
	}
}

// nextPiece splits the next piece off a multi-valued field: the bytes up
// to the separator, trimmed of spaces, and the rest after it (nil after
// the last piece).
func nextPiece(rest []byte, sep byte) (piece, after []byte) {
	piece = rest
	if i := bytes.IndexByte(rest, sep); i >= 0 {
		piece, after = rest[:i], rest[i+1:]
	}
	if len(piece) > 0 && (piece[0] <= ' ' || piece[len(piece)-1] <= ' ') {
		piece = dsl.TrimField(piece, sep)
	}
	return piece, after
}

// multi reads the field of a multi-valued ids column into ids (int32
// ids) or keys (int64 keys, the spec's kind wide; the other one nil), of
// max_len slots: its ids in order, hashed, of a vocabulary or integers,
// then -1 (ids) or ir.PadKey (keys) in the slots left. Empty pieces
// (between two separators, or an empty field) hold no id; past max_len
// ids the rest of the field is dropped and the field counted in
// truncated[j].
func (p *rowParser) multi(s *idSpec, j, lineNo int, ids []int32, keys []int64) error {
	col, n, width := s.c.Cols[0], 0, max(len(ids), len(keys))
	it := p.pieces(col, s.sep)
	for {
		piece, ok := it.next()
		if !ok {
			break
		}
		if n == width {
			p.truncated[j]++
			break
		}
		switch s.kind {
		case idsBuckets:
			ids[n] = bucketOf(hashKey(s.seeds[0], piece), s.buckets)
		case keysHash64:
			keys[n] = ir.HashKey(hashKey(s.seeds[0], piece))
		case keysInt64, keysUint64:
			v, err := p.key(s, piece, col, lineNo)
			if err != nil {
				return err
			}
			keys[n] = v
		case idsVocab:
			v, err := p.vocabID(s, 0, piece, col, lineNo)
			if err != nil {
				return err
			}
			ids[n] = v
		default:
			v, err := p.id(s, piece, col, lineNo)
			if err != nil {
				return err
			}
			ids[n] = v
		}
		n++
	}
	for ; n < len(ids); n++ {
		ids[n] = -1
	}
	for ; n < len(keys); n++ {
		keys[n] = ir.PadKey
	}
	return nil
}

// key reads an int64 key field f (of column col) of a spec with key:
// int64 (a decimal integer of the int64 range) or key: uint64 (one of the
// uint64 range, its bits as an int64), other than the padding key.
func (p *rowParser) key(s *idSpec, f []byte, col, lineNo int) (int64, error) {
	c := s.c
	if len(f) == 0 {
		if c.Fill != nil {
			return c.FillKey, nil
		}
		return 0, p.errAt(lineNo, "%s is empty; add fill: KEY to %s (%s) to stand in for missing keys, or key: hash64 to hash the column's strings", p.colName(col), c.Key(), c.Pos)
	}
	var v int64
	var ok bool
	if s.kind == keysUint64 {
		var u uint64
		u, ok = parseUint64(f)
		v = int64(u)
	} else {
		v, ok = parseInt64(f)
	}
	switch {
	case !ok && s.kind == keysUint64:
		return 0, p.errAt(lineNo, "%s: %q is not an integer of the uint64 range (0 to 18446744073709551615), because it is read as uint64 keys %q (%s, key: uint64); fix the row, or write key: hash64 to hash the column's strings", p.colName(col), f, c.Name, c.Pos)
	case !ok:
		hint := "write key: hash64 to hash the column's strings"
		if u, isU := parseUint64(f); isU && u >= 1<<63 {
			hint = "it is an unsigned 64-bit integer: write key: uint64"
		}
		return 0, p.errAt(lineNo, "%s: %q is not an integer of the int64 range, because it is read as int64 keys %q (%s, key: int64); fix the row, or %s", p.colName(col), f, c.Name, c.Pos, hint)
	case v == ir.PadKey:
		return 0, p.errAt(lineNo, "%s: key %s is the padding key of int64 keys (-2^63, 2^63 as uint64), which %s %q (%s) cannot hold; fix the row, or write key: hash64 to hash the column", p.colName(col), f, c.Key(), c.Name, c.Pos)
	}
	return v, nil
}
