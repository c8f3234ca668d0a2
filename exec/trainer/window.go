package trainer

import (
	"fmt"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/kernels"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/exec/tensor"
)

// window is the progressive validation of an online run: the loss and
// metrics of its last rows, each scored by the step that trained on it,
// before that step's update (the forward pass's own outputs). An auc
// metric is computed over the window's rows at once (kernels.AUCWindow);
// the loss and other metrics are the mean of the last batches' values
// covering the window.
type window struct {
	names []string // the loss, then the metrics
	aucs  []aucWindow
	vals  [][]float64 // per batch in the ring, per name
	next  int
	full  bool
	batch int
	out   []float64
	// kept is the window as a checkpoint holds it (windowValues, ...):
	// filled by keep before a checkpoint is written, read by restored
	// after one is restored.
	kept map[string]*tensor.Tensor
}

type aucWindow struct {
	at            int
	scores, label string
	w             *kernels.AUCWindow
}

func newWindow(g *dsl.Graph, size, batch int) *window {
	w := &window{names: append([]string{g.Train.Loss}, g.Train.Metrics...), batch: batch}
	nb := max(1, (size+batch-1)/batch)
	w.vals = make([][]float64, nb)
	for i := range w.vals {
		w.vals[i] = make([]float64, len(w.names))
	}
	w.out = make([]float64, len(w.names))
	prod := g.Producers()
	for i, m := range w.names {
		if j, ok := prod[m]; ok && g.Ops[j].Type == "auc" {
			op := g.Ops[j]
			w.aucs = append(w.aucs, aucWindow{at: i, scores: op.Inputs[0], label: op.Inputs[1], w: kernels.NewAUCWindow(nb * batch)})
		}
	}
	w.kept = map[string]*tensor.Tensor{
		windowValues: tensor.New(tensor.F32, tensor.Shape{nb, len(w.names)}),
		windowState:  tensor.New(tensor.I64, tensor.Shape{2 + 2*len(w.aucs)}),
	}
	for i := range w.aucs {
		w.kept[windowAUC(i)] = tensor.New(tensor.F32, tensor.Shape{nb * batch, 2})
	}
	return w
}

// add adds a step's batch: its values and its auc rows.
func (w *window) add(s program.Scope) error {
	row := w.vals[w.next]
	for i, n := range w.names {
		row[i] = float64(s[n].F[0])
	}
	for _, a := range w.aucs {
		if err := a.w.Add(s[a.scores], s[a.label], w.batch); err != nil {
			return err
		}
	}
	w.next++
	if w.next == len(w.vals) {
		w.next, w.full = 0, true
	}
	return nil
}

// rows is the rows the window covers.
func (w *window) rows() int {
	if w.full {
		return len(w.vals) * w.batch
	}
	return w.next * w.batch
}

// values is the window's loss and metrics (NaN before the first step),
// valid until the next call.
func (w *window) values() []float64 {
	n := w.next
	if w.full {
		n = len(w.vals)
	}
	for i := range w.out {
		w.out[i] = 0
		for _, row := range w.vals[:n] {
			w.out[i] += row[i]
		}
		w.out[i] /= float64(n)
	}
	for _, a := range w.aucs {
		w.out[a.at] = a.w.AUC()
	}
	return w.out
}

// The window's tensors in a checkpoint, beside the model state of the
// same step (names psgraph reserves): each batch's loss and metrics in
// the ring's order, each auc metric's rows (score, label), and where each
// ring is (next, full).
const (
	windowValues = "psgraph/window/values"
	windowState  = "psgraph/window/state"
)

func windowAUC(i int) string { return fmt.Sprintf("psgraph/window/auc%d", i) }

// keep fills the window's checkpoint tensors (kept) with the window as
// it is: a checkpoint then holds it, so a run resumed from it reports
// the windowed loss and metrics the run would have reported undisturbed.
// The values are float32 scalars' (exact in float32).
func (w *window) keep() map[string]*tensor.Tensor {
	v := w.kept[windowValues].F
	for b, row := range w.vals {
		for i, x := range row {
			v[b*len(row)+i] = float32(x)
		}
	}
	st := w.kept[windowState].L
	st[0], st[1] = int64(w.next), b2i(w.full)
	for i, a := range w.aucs {
		next, full := a.w.State(w.kept[windowAUC(i)].F)
		st[2+2*i], st[3+2*i] = int64(next), b2i(full)
	}
	return w.kept
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// restored takes the window back from its checkpoint tensors, once a
// restore filled every one of them (got); false (the window stays empty)
// when the checkpoint held none or another window's (another
// metrics_window or batch).
func (w *window) restored(got map[string]bool) (bool, error) {
	for name := range w.kept {
		if !got[name] {
			return false, nil
		}
	}
	st := w.kept[windowState].L
	if st[0] < 0 || st[0] >= int64(len(w.vals)) {
		return false, fmt.Errorf("the checkpoint's progressive validation window says its next batch is %d of %d", st[0], len(w.vals))
	}
	v := w.kept[windowValues].F
	for b, row := range w.vals {
		for i := range row {
			row[i] = float64(v[b*len(row)+i])
		}
	}
	w.next, w.full = int(st[0]), st[1] == 1
	for i, a := range w.aucs {
		if err := a.w.SetState(w.kept[windowAUC(i)].F, int(st[2+2*i]), st[3+2*i] == 1); err != nil {
			return false, fmt.Errorf("the checkpoint's progressive validation window: %w", err)
		}
	}
	return true, nil
}
