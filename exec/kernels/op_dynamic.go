package kernels

import (
	"fmt"
	"unsafe"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/blas"
	"github.com/psgraph/psgraph/exec/dyntable"
	"github.com/psgraph/psgraph/exec/tensor"
)

// The kernels of a dynamic table's ops (dsl/ops/op_dynamic.go): the table
// lives in a dyntable.Table; dyn_pull finds the step's distinct keys,
// counts their sightings (admitting keys), and copies their rows into a
// row-sparse tensor whose rows are positions 0..n-1; dyn_pos maps each
// key of an ids input to its position; dyn_gather and dyn_scatter read
// and write columns of the rows by the slots dyn_pull found.

func init() {
	register("dyn_pull", dynPullKernel)
	register("dyn_pos", dynPosKernel)
	register("dyn_gather", dynGatherKernel)
	register("dyn_scatter", dynScatterKernel)
}

// SweepPerStep is the number of records a training step's dyn_scatter
// sweeps for expired rows (dyntable.Table.Sweep).
const SweepPerStep = 65536

// Dynamic is one dynamic table of a program and what its ops share within
// a step: the keys dyn_pull found, their counts and slots, and an
// open-addressing index from key to position (no allocation per step).
type Dynamic struct {
	Table *dyntable.Table

	keys   []int64
	counts []uint32
	slots  []int32
	index  []keyPos // open addressing, linear probing
	mask   uint64
	// ents are the keys' entries in index, which reset clears.
	ents []int32
	// The step's ids inputs, as added (addInputs), and each flat key's
	// position (-1 for padding), which dyn_pos copies.
	srcs []*tensor.Tensor
	flat [][]int32
}

// keyPos is an entry of Dynamic's index: a key and its position+1 (0: an
// empty entry), side by side so that a probe reads one cache line.
type keyPos struct {
	key int64
	pos int32
}

// NewDynamic wraps a table for one program.
func NewDynamic(t *dyntable.Table) *Dynamic { return &Dynamic{Table: t} }

func (d *Dynamic) size(maxKeys int) {
	if cap(d.keys) >= maxKeys {
		return
	}
	n := 16
	for n < 2*maxKeys {
		n *= 2
	}
	d.keys, d.counts, d.slots = make([]int64, 0, maxKeys), make([]uint32, maxKeys), make([]int32, maxKeys)
	d.ents = make([]int32, maxKeys)
	d.index, d.mask = make([]keyPos, n), uint64(n-1)
}

func (d *Dynamic) home(key int64) uint64 { return uint64(key) * 0x9E3779B97F4A7C15 >> 20 & d.mask }

func (d *Dynamic) bucket(key int64) uint64 { return d.probe(key, d.home(key)) }

// probe finds key's entry, or the empty one it would take, from home b on.
func (d *Dynamic) probe(key int64, b uint64) uint64 {
	for e := &d.index[b]; e.pos != 0 && e.key != key; e = &d.index[b] {
		b = (b + 1) & d.mask
	}
	return b
}

// reset empties the index in time proportional to the keys it held.
func (d *Dynamic) reset() {
	for _, b := range d.ents[:len(d.keys)] {
		d.index[b].pos = 0
	}
	d.keys = d.keys[:0]
	d.srcs = d.srcs[:0]
}

// addInputs resets the step's keys and adds the keys of each of ins
// (addAll), keeping each flat key's position for dyn_pos (positions).
func (d *Dynamic) addInputs(ins []*tensor.Tensor) {
	d.reset()
	d.srcs = append(d.srcs, ins...)
	for len(d.flat) < len(ins) {
		d.flat = append(d.flat, nil)
	}
	for i, in := range ins {
		if cap(d.flat[i]) < len(in.L) {
			d.flat[i] = make([]int32, len(in.L))
		}
		d.flat[i] = d.flat[i][:len(in.L)]
		d.addAll(in.L, d.flat[i])
	}
}

// positions is the position of each flat key of ids, a tensor addInputs
// added this step, or nil.
func (d *Dynamic) positions(ids *tensor.Tensor) []int32 {
	for i, src := range d.srcs {
		if src == ids {
			return d.flat[i]
		}
	}
	return nil
}

// addAll counts a sighting of each of keys but PadKey, a group of
// addGroup keys at a time: it asks for their home entries first
// (blas.Prefetch), then adds them, so that the group's cache misses in the
// index overlap. pos gets each key's position (-1 for PadKey).
func (d *Dynamic) addAll(keys []int64, pos []int32) {
	var homes [addGroup]uint64
	for lo := 0; lo < len(keys); lo += addGroup {
		group := keys[lo:min(lo+addGroup, len(keys))]
		for j, key := range group {
			b := d.home(key)
			homes[j] = b
			blas.Prefetch(uintptr(unsafe.Pointer(&d.index[b])))
		}
		for j, key := range group {
			p := int32(-1)
			if key != ir.PadKey {
				p = d.add(key, homes[j])
			}
			pos[lo+j] = p
		}
	}
}

const addGroup = 64

// add counts a sighting of key, whose home entry is b, and returns its
// position.
func (d *Dynamic) add(key int64, b uint64) int32 {
	b = d.probe(key, b)
	e := &d.index[b]
	if e.pos != 0 {
		d.counts[e.pos-1]++
		return e.pos - 1
	}
	n := len(d.keys)
	e.key, e.pos = key, int32(n+1)
	d.ents[n], d.counts[n] = int32(b), 1
	d.keys = append(d.keys, key)
	return int32(n)
}

// pos is key's position this step, or -1.
func (d *Dynamic) pos(key int64) int32 { return d.index[d.bucket(key)].pos - 1 }

func dynamicOf(k Args) (*Dynamic, string, error) {
	v := k.Attrs.String("var")
	d := k.Dynamic[v]
	if d == nil || d.Table == nil {
		return nil, v, fmt.Errorf("dynamic table %s has no storage on this node (compile the program with its tables)", v)
	}
	return d, v, nil
}

func dynPullKernel(k Args) (Kernel, error) {
	d, v, err := dynamicOf(k)
	if err != nil {
		return nil, err
	}
	out := k.Out[0]
	d.size(cap(out.Rows.IDs))
	if w := d.Table.Config().Dim; w != out.RowWidth() {
		return nil, fmt.Errorf("dynamic table %s holds rows of %d floats, the graph reads %d", v, w, out.RowWidth())
	}
	ins := k.In
	return func(rt Runtime) error {
		d.addInputs(ins)
		n := len(d.keys)
		out.Rows.Identity(n)
		out.Fit()
		if k.Inference {
			if l := rt.TableReads(); l != nil {
				l.Lock()
				defer l.Unlock()
			}
			return d.Table.Read(d.keys, out.F)
		}
		if err := d.Table.Advance(rt.Step()); err != nil {
			return fmt.Errorf("%s: %w", v, err)
		}
		return d.Table.Pull(d.keys, d.counts[:n], d.slots[:n], out.F)
	}, nil
}

func dynPosKernel(k Args) (Kernel, error) {
	v := k.Attrs.String("var")
	d, err := remoteOf(k, v) // the pull's index (on a trainer of a split job, the fetch's)
	if err != nil {
		return nil, err
	}
	ids, pos := k.In[1], k.Out[0]
	return func(Runtime) error {
		if p := d.positions(ids); p != nil {
			copy(pos.I, p) // the pull's positions of these very keys
			return nil
		}
		for i, key := range ids.L {
			if key == ir.PadKey {
				pos.I[i] = -1
				continue
			}
			p := d.pos(key)
			if p < 0 {
				return fmt.Errorf("key %d at flat position %d of ids %v was not pulled from %s; read it through the table's dyn_pull", key, i, ids.Shape, v)
			}
			pos.I[i] = p
		}
		return nil
	}, nil
}

// Slots fills buf with the table slots of the rows r holds (positions of
// dyn_pull's rows, or dyn_accumulate's).
func (d *Dynamic) Slots(r *tensor.RowSet, buf []int32) []int32 {
	buf = buf[:len(r.IDs)]
	for i, id := range r.IDs {
		buf[i] = d.slots[id]
	}
	return buf
}

func dynGatherKernel(k Args) (Kernel, error) {
	d, _, err := dynamicOf(k)
	if err != nil {
		return nil, err
	}
	out := k.Out[0]
	col, width := k.Attrs.Int("col"), k.Attrs.Int("width")
	buf := make([]int32, cap(out.Rows.IDs))
	return func(Runtime) error {
		out.Fit()
		return d.Table.Gather(d.Slots(out.Rows, buf), col, width, out.F)
	}, nil
}

func dynScatterKernel(k Args) (Kernel, error) {
	d, v, err := dynamicOf(k)
	if err != nil {
		return nil, err
	}
	cols := k.Attrs.Ints("cols")
	vals := k.In[:len(cols)]
	buf := make([]int32, cap(vals[0].Rows.IDs))
	return func(Runtime) error {
		for i, x := range vals {
			if err := d.Table.Scatter(d.Slots(x.Rows, buf), cols[i], x.RowWidth(), x.F); err != nil {
				return fmt.Errorf("%s: %w", v, err)
			}
		}
		d.Table.Sweep(SweepPerStep)
		return nil
	}, nil
}
