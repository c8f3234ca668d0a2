package kernels

import (
	"fmt"
	"math"
	"slices"

	"github.com/psgraph/psgraph/exec/tensor"
)

// AUCWindow keeps the rows of an auc op's inputs over the last Size rows
// added (a ring: each batch's rows push out the oldest), so that a
// training run reports the AUC of its last rows, each scored before the
// update it took part in (progressive validation). It keeps 8 bytes per
// row; Add allocates nothing, AUC only the first time.
type AUCWindow struct {
	ring   []ranked
	next   int
	full   bool
	batch  []ranked // one batch's rows, ranked
	sorted []ranked
	tmp    []ranked // the sort's scratch
}

// NewAUCWindow is a window of the last size rows.
func NewAUCWindow(size int) *AUCWindow { return &AUCWindow{ring: make([]ranked, size)} }

// Add adds the first n rows of scores and label, the inputs of an auc op
// (its errors: a label not 0 or 1).
func (w *AUCWindow) Add(scores, label *tensor.Tensor, n int) error {
	if cap(w.batch) < n {
		w.batch = make([]ranked, n)
	}
	rs := w.batch[:n]
	if _, err := rankRows(rs, scores, label); err != nil {
		return err
	}
	if n > len(w.ring) {
		rs = rs[n-len(w.ring):]
	}
	for len(rs) > 0 {
		c := copy(w.ring[w.next:], rs)
		rs = rs[c:]
		w.next += c
		if w.next == len(w.ring) {
			w.next, w.full = 0, true
		}
	}
	return nil
}

// Rows is the number of rows the window holds.
func (w *AUCWindow) Rows() int {
	if w.full {
		return len(w.ring)
	}
	return w.next
}

// AUC is the AUC of the window's rows: NaN when a score is NaN or they
// hold one class.
func (w *AUCWindow) AUC() float64 {
	w.sorted = append(w.sorted[:0], w.ring[:w.Rows()]...)
	for _, r := range w.sorted {
		if math.IsNaN(float64(r.score())) {
			return math.NaN()
		}
	}
	w.tmp = slices.Grow(w.tmp[:0], len(w.sorted))[:len(w.sorted)]
	return mannWhitney(w.sorted, w.tmp)
}

// State writes the window's ring into dst (2 floats a row, as many rows as the window keeps:
// the score, then 1 for a positive label and 0 for a negative) and
// returns where the next row goes and whether the ring is full: what
// SetState takes back (a checkpoint keeps it).
func (w *AUCWindow) State(dst []float32) (next int, full bool) {
	for i, r := range w.ring {
		dst[2*i] = r.score()
		dst[2*i+1] = 0
		if r.pos() {
			dst[2*i+1] = 1
		}
	}
	return w.next, w.full
}

// SetState makes the window the one State described.
func (w *AUCWindow) SetState(src []float32, next int, full bool) error {
	if len(src) != 2*len(w.ring) || next < 0 || next >= max(len(w.ring), 1) {
		return fmt.Errorf("an auc window of %d rows cannot take a state of %d values, next %d", len(w.ring), len(src), next)
	}
	for i := range w.ring {
		l := src[2*i+1]
		if l != 0 && l != 1 {
			return fmt.Errorf("an auc window's state holds the label %g", l)
		}
		w.ring[i] = rank(src[2*i], l == 1)
	}
	w.next, w.full = next, full
	return nil
}
