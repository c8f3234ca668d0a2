package data

import (
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/progress"
)

// Split is a model's data: the training rows and the held-out rows of
// data.eval (nil without it), both normalized with Norm, the statistics of
// the training rows (nil: normalize none).
type Split struct {
	Train, Eval *Set
	Norm        *Scaling
}

// LoadSplit reads a model's data and its held-out data (data.eval). The
// normalization statistics are those of the training rows only, unless
// norm is given (the statistics saved with a model), which then applies to
// both.
func LoadSplit(spec *dsl.Data, norm *Scaling) (*Split, error) {
	return LoadSplitProgress(spec, norm, nil)
}

// LoadSplitProgress is LoadSplit reporting the progress of reading the
// file to rep (nil: none).
func LoadSplitProgress(spec *dsl.Data, norm *Scaling, rep *progress.Reporter) (*Split, error) {
	var saved Vocabs
	if norm != nil {
		saved = norm.Vocabs
	}
	all, err := raw(spec, rep, saved)
	if err != nil {
		return nil, err
	}
	sp := &Split{Train: all}
	if e := spec.Eval; e != nil && e.Fraction > 0 {
		held, err := heldOutOf(spec, all.Rows, all.Labels)
		if err != nil {
			return nil, err
		}
		sp.Train, sp.Eval = subset(all, held, false), subset(all, held, true)
	}
	if norm == nil {
		norm = stats(sp.Train, spec.Normalize)
		if all.vocabs != nil {
			if norm == nil {
				norm = &Scaling{Mode: spec.Normalize}
			}
			norm.Vocabs = all.vocabs
		}
	} else if err := norm.fits(all.NF); err != nil {
		return nil, err
	}
	sp.Norm = norm
	if e := spec.Eval; e != nil && e.CSV != "" {
		held, err := Other(spec, e.CSV)
		if err != nil {
			return nil, err
		}
		if sp.Eval, err = raw(held, rep, all.vocabs); err != nil {
			return nil, err
		}
	}
	normalize(sp.Train, norm)
	if sp.Eval != nil {
		normalize(sp.Eval, norm)
	}
	return sp, nil
}

// LoadFile reads a data file with the columns of a model's data section
// (without its label when spec says none), normalized with norm (nil:
// none).
func LoadFile(spec *dsl.Data, path string, norm *Scaling) (*Set, error) {
	o, err := Other(spec, path)
	if err != nil {
		return nil, err
	}
	var saved Vocabs
	if norm != nil {
		saved = norm.Vocabs
	}
	s, err := raw(o, nil, saved)
	if err != nil {
		return nil, err
	}
	if err := norm.fits(s.NF); err != nil {
		return nil, err
	}
	normalize(s, norm)
	return s, nil
}

// WithFile is spec reading another file with the same columns, in file
// order, without held-out rows: evaluation and prediction data.
func WithFile(spec *dsl.Data, path string) *dsl.Data {
	c := *spec
	c.CSV, c.Synthetic, c.Eval, c.Shuffle = path, nil, nil, false
	return &c
}

// heldOutOf is which of rows rows data.eval's fraction holds out; labels
// are the rows' class ids, for a stratified split (nil: read them).
func heldOutOf(spec *dsl.Data, rows int, labels []int32) ([]bool, error) {
	if spec.Eval.Stratify {
		var err error
		if labels == nil {
			if labels, err = readLabels(spec); err != nil {
				return nil, err
			}
		}
		held, err := HeldOutStratified(labels, spec.Eval.Fraction, spec.SplitSeed())
		if err != nil {
			return nil, fmt.Errorf("data.eval (%s): %w", spec.Eval.Pos, err)
		}
		return held, nil
	}
	held, err := HeldOut(rows, spec.Eval.Fraction, spec.SplitSeed())
	if err != nil {
		return nil, fmt.Errorf("data.eval (%s): %w", spec.Eval.Pos, err)
	}
	return held, nil
}

func (sc *Scaling) fits(nf int) error {
	if sc != nil && sc.Shift != nil && len(sc.Shift) != nf {
		return fmt.Errorf("the saved normalization statistics cover %d feature columns, but the data has %d; the model file and the parameter file do not belong together", len(sc.Shift), nf)
	}
	return nil
}

// HeldOut says which of rows rows data.eval's fraction holds out: round(
// fraction x rows) of them (at least 1, leaving at least 1 to train on),
// drawn by seed (PCG(seed, 0xe7a1) permutes the rows; the first ones in
// the permutation are held out). It depends only on its arguments, so
// every trainer of a job, and eval afterwards, hold out the same rows.
func HeldOut(rows int, fraction float64, seed uint64) ([]bool, error) {
	if rows < 2 {
		return nil, fmt.Errorf("holding out a fraction of the rows needs at least 2 rows, the data has %d", rows)
	}
	k := heldCount(rows, fraction)
	held := make([]bool, rows)
	for _, i := range rand.New(rand.NewPCG(seed, 0xe7a1)).Perm(rows)[:k] {
		held[i] = true
	}
	return held, nil
}

// HeldOutStratified is HeldOut per class: the round(fraction x rows)
// rows held out are shared among the classes of labels in proportion to
// their rows (largest remainders: each class gets the whole part of its
// share, and the classes with the largest fractional parts one more,
// the smaller class id first on a tie), each class's drawn by seed from
// its rows as HeldOut draws them. So a class of a tenth of the rows is a
// tenth of the held-out rows, whatever the seed, and the count is
// HeldOut's.
func HeldOutStratified(labels []int32, fraction float64, seed uint64) ([]bool, error) {
	rows := len(labels)
	if rows < 2 {
		return nil, fmt.Errorf("holding out a fraction of the rows needs at least 2 rows, the data has %d", rows)
	}
	k := heldCount(rows, fraction)
	byClass := map[int32][]int{} // each class's rows, in the permutation's order
	for _, i := range rand.New(rand.NewPCG(seed, 0xe7a1)).Perm(rows) {
		byClass[labels[i]] = append(byClass[labels[i]], i)
	}
	classes := slices.Sorted(maps.Keys(byClass))
	take := make([]int, len(classes))
	rest := make([]int, len(classes)) // the fractional parts, in units of 1/rows
	given := 0
	for j, c := range classes {
		n := len(byClass[c]) * k
		take[j], rest[j] = n/rows, n%rows
		given += take[j]
	}
	order := make([]int, len(classes))
	for j := range order {
		order[j] = j
	}
	slices.SortStableFunc(order, func(a, b int) int { return rest[b] - rest[a] })
	for _, j := range order[:k-given] {
		take[j]++
	}
	held := make([]bool, rows)
	for j, c := range classes {
		for _, i := range byClass[c][:take[j]] {
			held[i] = true
		}
	}
	return held, nil
}

// readLabels reads the class ids of the rows of spec's file, in file
// order, parsing the label's column only.
func readLabels(spec *dsl.Data) ([]int32, error) {
	ls := *spec
	ls.Features, ls.IDs, ls.Normalize = nil, nil, ""
	p := newRowParser(&ls)
	src, err := openSource(&ls, p, 1<<20)
	if err != nil {
		return nil, err
	}
	defer src.close()
	var label int32
	var out rowOut
	p.rowOut(&out, nil, &label, nil, nil, nil)
	var labels []int32
	for {
		ok, err := src.row(&out)
		if err != nil {
			return nil, err
		}
		if !ok {
			return labels, nil
		}
		labels = append(labels, label)
	}
}

// subset is the rows of s whose held value is want, in file order.
func subset(s *Set, held []bool, want bool) *Set {
	out := &Set{NF: s.NF, NI: s.NI, NK: s.NK, NT: s.NT, spec: s.spec, layout: s.layout, truncated: s.truncated}
	for r := 0; r < s.Rows; r++ {
		if held[r] != want {
			continue
		}
		out.Features = append(out.Features, s.Features[r*s.NF:(r+1)*s.NF]...)
		out.IDs = append(out.IDs, s.IDs[r*s.NI:(r+1)*s.NI]...)
		out.Keys = append(out.Keys, s.Keys[r*s.NK:(r+1)*s.NK]...)
		if s.Labels != nil {
			out.Labels = append(out.Labels, s.Labels[r])
		}
		if s.Targets != nil {
			out.Targets = append(out.Targets, s.Targets[r*s.NT:(r+1)*s.NT]...)
		}
		out.Rows++
	}
	return out
}

// heldCount is how many of rows a held-out fraction takes: round(fraction
// x rows), at least 1, leaving at least 1.
func heldCount(rows int, fraction float64) int {
	return min(max(int(math.Round(fraction*float64(rows))), 1), rows-1)
}
