package kernels

import (
	"math"

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
		if math.IsNaN(float64(r.score)) {
			return math.NaN()
		}
	}
	return mannWhitney(w.sorted)
}
