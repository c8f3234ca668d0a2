package parquetschema

import (
	"errors"
	"fmt"
)

// The footer is a FileMetaData in thrift's compact protocol; of it,
// decodeSchema reads field 2, the schema (a list of SchemaElement), and
// of each element its type (field 1: present on a leaf only), its name
// (4) and its number of children (5), skipping everything else.

// Compact protocol types (a field header's low nibble, a list's element type).
const (
	tStop = iota
	tTrue
	tFalse
	tByte
	tI16
	tI32
	tI64
	tDouble
	tBinary
	tList
	tSet
	tMap
	tStruct
)

var errShort = errors.New("the footer ends inside a value")

// reader decodes compact-protocol values from a footer's bytes.
type reader struct {
	b     []byte
	depth int
}

func (r *reader) byte() (byte, error) {
	if len(r.b) == 0 {
		return 0, errShort
	}
	c := r.b[0]
	r.b = r.b[1:]
	return c, nil
}

func (r *reader) uvarint() (uint64, error) {
	var x uint64
	for shift := uint(0); shift < 64; shift += 7 {
		c, err := r.byte()
		if err != nil {
			return 0, err
		}
		x |= uint64(c&0x7f) << shift
		if c < 0x80 {
			return x, nil
		}
	}
	return 0, errors.New("a varint longer than 10 bytes")
}

// int is a zigzag varint (i16, i32, i64).
func (r *reader) int() (int64, error) {
	u, err := r.uvarint()
	return int64(u>>1) ^ -int64(u&1), err
}

func (r *reader) binary() ([]byte, error) {
	n, err := r.uvarint()
	if err != nil {
		return nil, err
	}
	if n > uint64(len(r.b)) {
		return nil, errShort
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v, nil
}

// field reads a struct's next field header: its id and type (tStop at
// the struct's end); last is the previous field's id.
func (r *reader) field(last int16) (int16, byte, error) {
	c, err := r.byte()
	if err != nil || c == tStop {
		return 0, tStop, err
	}
	typ := c & 0x0f
	if d := c >> 4; d != 0 {
		return last + int16(d), typ, nil
	}
	id, err := r.int()
	return int16(id), typ, err
}

// list reads a list's (or set's) header: its element type and length.
func (r *reader) list() (byte, int, error) {
	c, err := r.byte()
	if err != nil {
		return 0, 0, err
	}
	n := uint64(c >> 4)
	if n == 15 {
		if n, err = r.uvarint(); err != nil {
			return 0, 0, err
		}
	}
	if n > uint64(len(r.b)) { // every element takes a byte at least
		return 0, 0, errShort
	}
	return c & 0x0f, int(n), nil
}

// skip skips a value of type typ.
func (r *reader) skip(typ byte) error {
	switch typ {
	case tTrue, tFalse:
		return nil // in a struct, the type is the value
	case tByte:
		_, err := r.byte()
		return err
	case tI16, tI32, tI64:
		_, err := r.uvarint()
		return err
	case tDouble:
		if len(r.b) < 8 {
			return errShort
		}
		r.b = r.b[8:]
		return nil
	case tBinary:
		_, err := r.binary()
		return err
	}
	if r.depth++; r.depth > 64 {
		return errors.New("values nested more than 64 deep")
	}
	defer func() { r.depth-- }()
	switch typ {
	case tList, tSet:
		et, n, err := r.list()
		if err != nil {
			return err
		}
		for range n {
			if et == tTrue || et == tFalse { // a list's booleans take a byte each
				et = tByte
			}
			if err := r.skip(et); err != nil {
				return err
			}
		}
		return nil
	case tMap:
		n, err := r.uvarint()
		if err != nil || n == 0 {
			return err
		}
		if n > uint64(len(r.b)) {
			return errShort
		}
		kv, err := r.byte()
		if err != nil {
			return err
		}
		for range n {
			for _, t := range []byte{kv >> 4, kv & 0x0f} {
				if t == tTrue || t == tFalse {
					t = tByte
				}
				if err := r.skip(t); err != nil {
					return err
				}
			}
		}
		return nil
	case tStruct:
		var id int16
		for {
			f, t, err := r.field(id)
			if err != nil || t == tStop {
				return err
			}
			if err := r.skip(t); err != nil {
				return err
			}
			id = f
		}
	}
	return fmt.Errorf("a value of unknown type %d", typ)
}

// decodeSchema reads the schema's elements from a FileMetaData.
func decodeSchema(footer []byte) ([]Element, error) {
	r := &reader{b: footer}
	var id int16
	for {
		f, t, err := r.field(id)
		if err != nil {
			return nil, err
		}
		if t == tStop {
			return nil, errors.New("the footer holds no schema")
		}
		id = f
		if f != 2 || t != tList {
			if err := r.skip(t); err != nil {
				return nil, err
			}
			continue
		}
		et, n, err := r.list()
		if err != nil {
			return nil, err
		}
		if et != tStruct {
			return nil, fmt.Errorf("the schema is a list of type %d, not of structs", et)
		}
		elems := make([]Element, n)
		for i := range elems {
			if elems[i], err = r.element(); err != nil {
				return nil, fmt.Errorf("schema element %d: %v", i, err)
			}
		}
		return elems, nil
	}
}

// element reads a SchemaElement.
func (r *reader) element() (Element, error) {
	e := Element{Group: true}
	var id int16
	named := false
	for {
		f, t, err := r.field(id)
		if err != nil {
			return e, err
		}
		if t == tStop {
			if !named {
				return e, errors.New("it has no name")
			}
			return e, nil
		}
		id = f
		switch {
		case f == 1 && t == tI32:
			e.Group = false
			_, err = r.int()
		case f == 4 && t == tBinary:
			var b []byte
			b, err = r.binary()
			e.Name, named = string(b), true
		case f == 5 && t == tI32:
			var n int64
			n, err = r.int()
			if err == nil && (n < 0 || n > 1<<31-1) {
				err = fmt.Errorf("%d children", n)
			}
			e.Children = int(n)
		default:
			err = r.skip(t)
		}
		if err != nil {
			return e, err
		}
	}
}
