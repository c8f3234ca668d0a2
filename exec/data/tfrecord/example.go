package tfrecord

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
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
// their list (Keys.Decode hands it on as a Value's). Where it holds
// exactly one value laid out as writers most often lay it out (a
// bytes_list's value, an int64_list's packed varint, a float_list's
// packed float, every tag and length one byte), One is true and Raw (a
// bytes_list's) or X (an int64_list's value, a float_list's float32 bits)
// is that value, as Values.Next would give it.
type Feature struct {
	Key  []byte
	Kind Kind
	One  bool
	Raw  []byte
	X    uint64
	list []byte
}

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

// Keys gives the features of records the caller's slots by their keys
// (Decode), learning the order records list their keys in: records of
// one writer list their features in one order, some left out, so a
// record's next key is most often the one after the last one's place,
// compared in place, without a lookup.
type Keys struct {
	slot func(key []byte) int // a key met for the first time: its slot, -1 for none
	// seen is the keys met, in the order records list them, with their
	// slots; index is each one's number (in the order met), and place a
	// number's place in seen: a key learnt before others moves their
	// places, not the index.
	seen  []seenKey
	index map[string]int
	place []int
	// out and sink are Decode's, while it runs (common's rare cases
	// append to out, without keeping it in a register)
	out  []Value
	sink *Sink
}

type seenKey struct {
	key  []byte
	slot int
	id   int  // its number in Keys.index
	kind Kind // of its values the first time it was met
	// the map entry of the key and one value of its kind in the common
	// layout (every tag and length one byte), as the entry's first nw
	// words hold it (0: none; a key of more than 14 bytes): its first
	// 10+len(key) bytes, the lengths those of an empty value (tmpl); the
	// bytes that grow by the value's length (step); the bytes compared
	// (mask). n is the entry's bytes before its value, maxvl the longest
	// value whose lengths each take a byte (-1: no template, n 1).
	n, maxvl         int
	tmpl, step, mask [3]uint64
}

// newSeenKey is a key met for the first time, with the kind of its values.
func newSeenKey(key []byte, slot int, kind Kind) seenKey {
	k := seenKey{key: slices.Clone(key), slot: slot, kind: kind, n: 1, maxvl: -1}
	n := 10 + len(key)
	if n > 24 || kind < Bytes || kind > Int64 {
		return k
	}
	// 0a L 0a kl key.. 12 fl t ll 0a vl, where L = kl+8+vl, fl = vl+4,
	// ll = vl+2
	var hdr, step [24]byte
	hdr[0], hdr[1], hdr[2], hdr[3] = 0x0a, byte(len(key)+8), 0x0a, byte(len(key))
	copy(hdr[4:], key)
	h := hdr[4+len(key):]
	h[0], h[1], h[2], h[3], h[4], h[5] = 0x12, 4, byte(kind)<<3|2, 2, 0x0a, 0
	step[1], step[n-5], step[n-3], step[n-1] = 1, 1, 1, 1
	nw := (n + 7) / 8
	k.n, k.maxvl = n, 0x77-len(key)
	for i := range nw {
		k.tmpl[i] = binary.LittleEndian.Uint64(hdr[8*i:])
		k.step[i] = binary.LittleEndian.Uint64(step[8*i:])
		for j := 8 * i; j < min(8*i+8, n); j++ {
			k.mask[i] |= 0xff << (8 * (j - 8*i))
		}
	}
	return k
}

// maxSeen bounds the keys Keys learns the places of: the keys past it are
// looked up each time.
const maxSeen = 1 << 12

// NewKeys matches keys to slots by slot, called once a key.
func NewKeys(slot func(key []byte) int) *Keys {
	return &Keys{slot: slot, index: map[string]int{}}
}

// Value is a feature of a record that has a slot, as Decode gives it:
// its slot, the kind of its values and where the record holds their list
// (Values walks it). Where it holds exactly one value laid out as writers
// most often lay it out (as for Feature.One), One is true and Raw (a
// bytes_list's) or X (an int64_list's value, a float_list's float32
// bits) is that value, as Values.Next would give it. It holds no
// pointers: the record's offsets, not slices of it.
type Value struct {
	Slot     int
	X        uint64
	off, end int // the list, rec[off:end]
	Kind     Kind
	One      bool
}

// Raw is a One bytes_list's value; rec is the record Decode read.
func (v *Value) Raw(rec []byte) []byte { return rec[v.off+2 : v.end] }

// Values walks the feature's values; rec is the record Decode read.
func (v *Value) Values(rec []byte) Values {
	return Values{Kind: v.Kind, list: msg{b: rec[v.off:v.end]}}
}

// Sink is where Decode puts, by slot, the one value of a feature laid
// out as writers most often lay it out (One), instead of giving it in
// out: the commonest features of CTR data, a categorical's string and a
// count, read without a Value. Its slices are indexed by slot; a nil one
// takes nothing.
type Sink struct {
	// Raw takes a bytes_list's value (a slice of the record), for the
	// slots below its length.
	Raw [][]byte
	// Int takes an int64_list's value, and Got[slot] is set, for the
	// slots IntOK says (Int and Got at least as long as IntOK; the
	// caller clears Got).
	Int   []int64
	Got   []bool
	IntOK []bool
}

// noSink takes nothing.
var noSink Sink

// intOK says whether slot takes an int64_list's value.
func (s *Sink) intOK(slot int) bool { return slot < len(s.IntOK) && s.IntOK[slot] }

// Decode appends to out the features of the serialized tf.Example rec
// that have a slot, in the order the record lists them: those Features
// would give, with a slot; but a One value that sink takes it puts there
// instead (the last one, for a key the record lists twice). On an error
// it returns the features before the one it met the error in (a caller
// that reads values as it goes reads those first, as it would have), sink
// holding those before it.
func (k *Keys) Decode(rec []byte, out []Value, sink *Sink) ([]Value, error) {
	if sink == nil {
		sink = &noSink
	}
	fs := NewFeatures(rec)
	if len(rec) >= 2 && rec[0] == 0x0a { // the Example's Features message, first
		if l, n := binary.Uvarint(rec[1:]); n > 0 && l <= uint64(len(rec)-1-n) {
			fs.inner.b, fs.outer.b = rec[1+n:1+n+int(l)], rec[1+n+int(l):]
		}
	}
	at := 0 // where in seen the next key is looked for first
	k.out, k.sink = out, sink
	var f Feature
	for {
		fs.inner.b, at = k.common(rec, fs.inner.b, at)
		var ok bool
		var err error
		if len(fs.inner.b) > 0 || len(fs.outer.b) > 0 {
			ok, err = fs.Next(&f)
		}
		if err != nil || !ok {
			out = k.out
			k.out, k.sink = nil, nil
			return out, err
		}
		var slot int
		if at < len(k.seen) && string(k.seen[at].key) == string(f.Key) {
			slot = k.seen[at].slot
			at++
		} else {
			slot, at = k.find(f.Key, f.Kind, at)
		}
		if slot < 0 {
			continue
		}
		if f.One {
			switch {
			case f.Kind == Bytes && slot < len(sink.Raw):
				sink.Raw[slot] = f.Raw
				continue
			case f.Kind == Int64 && sink.intOK(slot):
				sink.Int[slot], sink.Got[slot] = int64(f.X), true
				continue
			}
		}
		v := Value{Slot: slot, Kind: f.Kind, One: f.One, X: f.X}
		if len(f.list) > 0 { // a slice of rec: its offset is what its capacity lacks of rec's
			v.off = cap(rec) - cap(f.list)
			v.end = v.off + len(f.list)
		}
		k.out = append(k.out, v)
	}
}

// common reads the features at the start of b (the rest of a Features
// message of rec) that are laid out the commonest way, feature after
// feature: the key of the place after the last one's (at), one value of
// the kind it had, every tag and length one byte. It compares the
// entry's bytes up to its value with the key's, a word at a time, puts
// their values in k.sink or k.out (as Decode says) and returns the rest
// of b and the place after the last key read. An entry that is not the
// expected key's is compared with the next three places' keys (features
// left out of the record, as find looks for them) before it is left to
// Features.
//
// The words are read from a 32-byte window of rec's capacity
// (rec[:cap(rec)]): the bytes past an entry's are masked off, and an
// entry that starts within 32 bytes of that capacity's end is left to
// Features. A record read in place from a
// buffer (Reader.Next) has its checksum and the buffer's next bytes past
// its end.
func (k *Keys) common(rec, b []byte, at int) ([]byte, int) {
	seen := k.seen
	full := rec[:cap(rec)]
	pos := cap(rec) - cap(b) // b's offset in rec
	lim := pos + len(b)      // and its end
	for i := at; i < len(seen); {
		sk := &seen[i]
		if pos+32 > len(full) {
			break
		}
		ws := (*[32]byte)(full[pos : pos+32])
		vl := int(ws[(sk.n-1)&31]) // the value's length
		end := pos + sk.n + vl
		x := uint64(vl)
		d := (binary.LittleEndian.Uint64(ws[:])^(sk.tmpl[0]+x*sk.step[0]))&sk.mask[0] |
			(binary.LittleEndian.Uint64(ws[8:])^(sk.tmpl[1]+x*sk.step[1]))&sk.mask[1] |
			(binary.LittleEndian.Uint64(ws[16:])^(sk.tmpl[2]+x*sk.step[2]))&sk.mask[2]
		if d != 0 || vl > sk.maxvl || end > lim {
			if i < at+3 { // a feature left out?
				i++
				continue
			}
			break
		}
		n := pos + sk.n // the value, full[n:end]
		pos, at = end, i+1
		i = at
		switch slot := sk.slot; {
		case slot < 0:
		case sk.kind == Bytes && slot < len(k.sink.Raw):
			k.sink.Raw[slot] = full[n:end]
		case sk.kind == Int64 && vl == 1 && full[n] < 0x80 && k.sink.intOK(slot):
			k.sink.Int[slot], k.sink.Got[slot] = int64(full[n]), true
		default:
			k.value(slot, sk.kind, full[n-2:end], n-2)
		}
	}
	return b[len(b)-(lim-pos):], at
}

// value gives the feature of slot whose list (in the common layout, its
// tag and length then one value) is l, rec[off:off+len(l)]: to the sink
// or out.
func (k *Keys) value(slot int, kind Kind, l []byte, off int) {
	v, one := uint64(0), true
	switch kind {
	case Int64:
		if u, m := binary.Uvarint(l[2:]); m > 0 && m == len(l)-2 {
			v = u
		} else {
			one = false
		}
		if one && k.sink.intOK(slot) {
			k.sink.Int[slot], k.sink.Got[slot] = int64(v), true
			return
		}
	case Float:
		if len(l) == 6 {
			v = uint64(binary.LittleEndian.Uint32(l[2:]))
		} else {
			one = false
		}
	}
	k.out = append(k.out, Value{Slot: slot, X: v, off: off, end: off + len(l), Kind: kind, One: one})
}

// find is the slot of a record's key not at place at of seen, and the
// place after it: looked for just after at (a key left out of the
// record), then in the index, else a new key, given its place after at.
func (k *Keys) find(key []byte, kind Kind, at int) (slot, next int) {
	for i := at; i < min(at+4, len(k.seen)); i++ {
		if string(k.seen[i].key) == string(key) {
			return k.seen[i].slot, i + 1
		}
	}
	if id, ok := k.index[string(key)]; ok {
		i := k.place[id]
		return k.seen[i].slot, i + 1
	}
	slot = k.slot(key)
	if len(k.seen) >= maxSeen {
		return slot, at
	}
	sk := newSeenKey(key, slot, kind)
	sk.id = len(k.place)
	k.index[string(key)] = sk.id
	k.place = append(k.place, at)
	k.seen = slices.Insert(k.seen, at, sk)
	for i := at + 1; i < len(k.seen); i++ {
		k.place[k.seen[i].id] = i
	}
	return slot, at + 1
}
