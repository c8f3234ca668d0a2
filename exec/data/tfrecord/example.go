package tfrecord

import (
	"encoding/binary"
	"fmt"
	"math"
)

// Kind is the kind of a feature's values.
type Kind uint8

const (
	Empty Kind = iota // a Feature without a list
	Bytes             // bytes_list
	Float             // float_list
	Int64             // int64_list
)

// Features walks the features of a serialized tf.Example: each Next is
// one feature's key and values, in the order the record holds them. It
// allocates nothing.
type Features struct {
	outer, inner msg // the Example's fields, and its Features message's
}

// NewFeatures walks the features of the example rec.
func NewFeatures(rec []byte) Features { return Features{outer: msg{b: rec}} }

// Feature is a feature of a record: its key, the kind of its values and
// their list (Values walks it). Where it holds exactly one value laid out
// as writers most often lay it out (a bytes_list's value, an int64_list's
// packed varint, a float_list's packed float, every tag and length one
// byte), One is true and Raw (a bytes_list's) or X (an int64_list's
// value, a float_list's float32 bits) is that value, as Values.Next would
// give it.
type Feature struct {
	Key  []byte
	Kind Kind
	One  bool
	Raw  []byte
	X    uint64
	list []byte
}

// Values walks the feature's values.
func (f *Feature) Values() Values { return Values{Kind: f.Kind, list: msg{b: f.list}} }

// Next reads the next feature into f; false after the last.
func (fs *Features) Next(f *Feature) (bool, error) {
	// the common case, as TensorFlow and most writers lay a feature out:
	// a map entry of its key then its Feature, which holds one list, every
	// tag and length one byte
	if b := fs.inner.b; len(b) >= 8 && b[0] == 0x0a && b[1] < 0x80 && int(b[1]) <= len(b)-2 {
		e := b[2 : 2+int(b[1])]
		if len(e) >= 2 && e[0] == 0x0a && e[1] < 0x80 && int(e[1]) <= len(e)-4 {
			key, r := e[2:2+int(e[1])], e[2+int(e[1]):]
			if r[0] == 0x12 && r[1] < 0x80 && int(r[1]) == len(r)-2 && len(r) >= 4 {
				if t := r[2]; t&7 == 2 && t>>3 >= 1 && t>>3 <= 3 && r[3] < 0x80 && int(r[3]) == len(r)-4 {
					fs.inner.b = b[2+int(b[1]):]
					l := r[4:]
					f.Key, f.Kind, f.list, f.One = key, Kind(t>>3), l, false
					if len(l) >= 2 && l[0] == 0x0a && l[1] < 0x80 && int(l[1]) == len(l)-2 {
						switch v := l[2:]; f.Kind {
						case Bytes:
							f.Raw, f.One = v, true
						case Int64:
							if len(v) == 1 && v[0] < 0x80 {
								f.X, f.One = uint64(v[0]), true
							} else if u, n := binary.Uvarint(v); n > 0 && n == len(v) {
								f.X, f.One = u, true
							}
						case Float:
							if len(v) == 4 {
								f.X, f.One = uint64(binary.LittleEndian.Uint32(v)), true
							}
						}
					}
					return true, nil
				}
			}
		}
	}
	f.One = false
	for {
		num, wt, v, _, more, err := fs.inner.next()
		if err != nil {
			return false, err
		}
		if !more {
			// the next Features message of the Example (field 1); there is one
			for {
				num, wt, v, _, more, err := fs.outer.next()
				if err != nil || !more {
					return false, err
				}
				if num == 1 && wt == 2 {
					fs.inner = msg{b: v}
					break
				}
			}
			continue
		}
		if num != 1 || wt != 2 { // Features.feature: a map entry
			continue
		}
		entry := msg{b: v}
		var key []byte
		var vals Values
		for {
			num, wt, v, _, more, err := entry.next()
			if err != nil {
				return false, err
			}
			if !more {
				break
			}
			switch {
			case num == 1 && wt == 2:
				key = v
			case num == 2 && wt == 2: // the Feature: its one list
				f := msg{b: v}
				for {
					num, wt, list, _, more, err := f.next()
					if err != nil {
						return false, err
					}
					if !more {
						break
					}
					if wt == 2 && num >= 1 && num <= 3 {
						vals = Values{Kind: Kind(num), list: msg{b: list}}
					}
				}
			}
		}
		f.Key, f.Kind, f.list = key, vals.Kind, vals.list.b
		return true, nil
	}
}

// Values walks the values of one feature.
type Values struct {
	Kind   Kind
	list   msg
	packed []byte // the rest of a packed run
}

// Next returns the next value: a bytes_list's bytes in b, an
// int64_list's value or a float_list's float32 bits in x; false after the
// last.
func (vs *Values) Next() (b []byte, x uint64, ok bool, err error) {
	for {
		if len(vs.packed) > 0 {
			if vs.Kind == Float {
				if len(vs.packed) < 4 {
					return nil, 0, false, errCorrupt("a packed float_list")
				}
				x, vs.packed = uint64(binary.LittleEndian.Uint32(vs.packed)), vs.packed[4:]
				return nil, x, true, nil
			}
			u, n := binary.Uvarint(vs.packed)
			if n <= 0 {
				return nil, 0, false, errCorrupt("a packed int64_list")
			}
			vs.packed = vs.packed[n:]
			return nil, u, true, nil
		}
		num, wt, v, x, more, err := vs.list.next()
		if err != nil || !more {
			return nil, 0, false, err
		}
		if num != 1 {
			continue
		}
		switch {
		case vs.Kind == Bytes && wt == 2:
			return v, 0, true, nil
		case wt == 2 && vs.Kind != Bytes:
			vs.packed = v
		case wt == 0 && vs.Kind == Int64, wt == 5 && vs.Kind == Float:
			return nil, x, true, nil
		}
	}
}

// Float is a float_list value's float32 from the bits Next gave.
func Float32(x uint64) float32 { return math.Float32frombits(uint32(x)) }

func errCorrupt(what string) error {
	return fmt.Errorf("%s that cannot be decoded: %w", what, ErrCorrupt)
}

// msg walks the fields of a protocol buffer message.
type msg struct{ b []byte }

// next returns the next field's number, wire type, and its bytes
// (length-delimited) or value (varint, fixed32, fixed64); false after
// the last.
func (m *msg) next() (num, wt int, v []byte, x uint64, ok bool, err error) {
	b := m.b
	if len(b) == 0 {
		return 0, 0, nil, 0, false, nil
	}
	if len(b) >= 2 && b[0] < 0x80 && b[0]&7 == 2 && b[1] < 0x80 && int(b[1]) <= len(b)-2 {
		// the common case: a length-delimited field with a one-byte tag and length
		l := int(b[1])
		m.b = b[2+l:]
		return int(b[0] >> 3), 2, b[2 : 2+l], 0, true, nil
	}
	tag, n := binary.Uvarint(b)
	if n <= 0 {
		return 0, 0, nil, 0, false, errCorrupt("a tf.Example")
	}
	b = b[n:]
	num, wt = int(tag>>3), int(tag&7)
	switch wt {
	case 0:
		if x, n = binary.Uvarint(b); n <= 0 {
			return 0, 0, nil, 0, false, errCorrupt("a tf.Example")
		}
		b = b[n:]
	case 1:
		if len(b) < 8 {
			return 0, 0, nil, 0, false, errCorrupt("a tf.Example")
		}
		x, b = binary.LittleEndian.Uint64(b), b[8:]
	case 2:
		l, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < l {
			return 0, 0, nil, 0, false, errCorrupt("a tf.Example")
		}
		v, b = b[n:n+int(l)], b[n+int(l):]
	case 5:
		if len(b) < 4 {
			return 0, 0, nil, 0, false, errCorrupt("a tf.Example")
		}
		x, b = uint64(binary.LittleEndian.Uint32(b)), b[4:]
	default:
		return 0, 0, nil, 0, false, errCorrupt("a tf.Example")
	}
	m.b = b
	return num, wt, v, x, true, nil
}
