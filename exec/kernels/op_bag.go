package kernels

import (
	"fmt"
	"math"

	"github.com/psgraph/psgraph/exec/tensor"
)

// embedding_bag and its row-sparse gradient. A bag is the last axis of
// ids; an id < 0 is padding. The table is either the whole table (dense)
// or, in a split job, the rows a trainer fetched of a sharded table (a
// row-sparse value holding every real id of the batch).

func init() {
	register("embedding_bag", func(k Args) (Kernel, error) {
		b := newBag(k.In[0], k.In[1], k.Attrs.String("mode"))
		y := k.Out[0]
		return func(rt Runtime) error {
			if l := rt.TableReads(); l != nil {
				l.Lock()
				defer l.Unlock()
			}
			return b.forward(b.ids.I, y.F)
		}, nil
	})
	register("embedding_bag_grad", func(k Args) (Kernel, error) {
		dy, dt := k.In[0], k.Out[0]
		b := newBag(k.In[2], k.In[1], k.Attrs.String("mode"))
		if b.table.Rows != nil {
			return func(Runtime) error { return b.backwardFetched(b.ids.I, dy.F, dt) }, nil
		}
		return func(Runtime) error { return b.backward(b.ids.I, dy.F, dt) }, nil
	})
}

// bag holds what both directions need: the table, the ids, the bag length
// and the pooling mode.
type bag struct {
	table, ids *tensor.Tensor
	d, l       int
	mode       string
}

func newBag(table, ids *tensor.Tensor, mode string) *bag {
	return &bag{table: table, ids: ids, d: table.Shape[1], l: ids.Shape[len(ids.Shape)-1], mode: mode}
}

// weight is the factor of a bag of n real ids: 1 (sum), 1/n (mean) or
// 1/sqrt(n) (sqrtn).
func (b *bag) weight(n int) float32 {
	switch {
	case n == 0 || b.mode == "sum":
		return 1
	case b.mode == "mean":
		return 1 / float32(n)
	}
	return float32(1 / math.Sqrt(float64(n)))
}

// row returns the row of the table's values holding id: id itself in a
// dense table, its slot in fetched rows. flat is id's position in ids.
func (b *bag) row(id int32, flat int) (int, error) {
	t := b.table
	if t.Rows == nil {
		if int(id) >= t.Shape[0] {
			return 0, idRange(flat, id, t.Shape[0], b.ids.Shape)
		}
		return int(id), nil
	}
	s := t.Rows.Slot(id)
	if s < 0 {
		return 0, fmt.Errorf("id %d at flat position %d of ids %v was not fetched; look it up through the fetch_rows of its table", id, flat, b.ids.Shape)
	}
	return s, nil
}

// count is the number of real ids (>= 0) of a bag.
func count(bag []int32) int {
	n := 0
	for _, id := range bag {
		if id >= 0 {
			n++
		}
	}
	return n
}

// forward writes each bag's pooled rows into y.
func (b *bag) forward(ids []int32, y []float32) error {
	d, l, tf := b.d, b.l, b.table.F
	for i := 0; i*l < len(ids); i++ {
		out := y[i*d : (i+1)*d]
		clear(out)
		n := 0
		for j, id := range ids[i*l : (i+1)*l] {
			if id < 0 {
				continue
			}
			r, err := b.row(id, i*l+j)
			if err != nil {
				return err
			}
			src := tf[r*d : (r+1)*d]
			for c, v := range src {
				out[c] += v
			}
			n++
		}
		if w := b.weight(n); w != 1 {
			for c := range out {
				out[c] *= w
			}
		}
	}
	return nil
}

// backward is the row gradient of a dense table: one row per real id, in
// order of first appearance, holding the sum over its occurrences of the
// bag's dy times the bag's weight.
func (b *bag) backward(ids []int32, dy []float32, dt *tensor.Tensor) error {
	d, l := b.d, b.l
	v := b.table.Shape[0]
	for j, id := range ids {
		if int(id) >= v {
			return idRange(j, id, v, b.ids.Shape)
		}
	}
	dt.Rows.Reset()
	dt.F = dt.F[:0]
	for i := 0; i*l < len(ids); i++ {
		bag := ids[i*l : (i+1)*l]
		w := b.weight(count(bag))
		g := dy[i*d : (i+1)*d]
		for _, id := range bag {
			if id < 0 {
				continue
			}
			slot, fresh := dt.Rows.Add(id)
			if fresh {
				dt.F = dt.F[:(slot+1)*d]
				clear(dt.F[slot*d:])
			}
			acc := dt.F[slot*d : (slot+1)*d]
			for c, v := range g {
				acc[c] += w * v
			}
		}
	}
	return nil
}

// backwardFetched is the row gradient into the rows a trainer fetched:
// it holds exactly those rows (zero where this op's bags have none).
func (b *bag) backwardFetched(ids []int32, dy []float32, dt *tensor.Tensor) error {
	d, l := b.d, b.l
	dt.Fit()
	clear(dt.F)
	for i := 0; i*l < len(ids); i++ {
		bag := ids[i*l : (i+1)*l]
		w := b.weight(count(bag))
		g := dy[i*d : (i+1)*d]
		for j, id := range bag {
			if id < 0 {
				continue
			}
			slot := dt.Rows.Slot(id)
			if slot < 0 {
				return fmt.Errorf("id %d at flat position %d of ids %v was not fetched; look it up through the fetch_rows of its table", id, i*l+j, b.ids.Shape)
			}
			acc := dt.F[slot*d : (slot+1)*d]
			for c, v := range g {
				acc[c] += w * v
			}
		}
	}
	return nil
}
