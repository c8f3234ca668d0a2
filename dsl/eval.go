package dsl

import (
	"os"
	"path/filepath"

	"gopkg.in/yaml.v3"
)

// Eval is a model's held-out data (data.eval): a second file with the
// training file's columns, or a fraction of the training rows drawn by
// its seed (data.seed unless it has its own), per class when stratified.
// Evaluation uses the training split's normalization statistics.
type Eval struct {
	CSV      string  // resolved path; "" for a fraction
	Fraction float64 // in (0, 1); 0 for a file
	// Stratify: the fraction of each class of the label is held out (its
	// share of the held-out rows is its share of all rows).
	Stratify bool
	// Seed draws the held-out rows; nil: data.seed's.
	Seed *uint64
	Pos  Pos

	stratifyPos Pos
}

var evalKeys = []string{"csv", "fraction", "stratify", "seed"}

// SplitSeed is the seed that draws the held-out fraction: eval.seed, else
// data.seed.
func (d *Data) SplitSeed() uint64 {
	if d.Eval != nil && d.Eval.Seed != nil {
		return *d.Eval.Seed
	}
	return d.Seed
}

// eval decodes data.eval: {csv: FILE} or {fraction: F}.
func (d *decoder) eval(n *yaml.Node, dir string) *Eval {
	e := &Eval{Pos: d.pos(n)}
	var csvNode, fracNode, splitNode *yaml.Node
	d.fields(n, "data.eval", evalKeys, func(key string, k, v *yaml.Node) {
		switch key {
		case "stratify":
			splitNode = k
			e.stratifyPos = d.pos(k)
			if b, ok := d.boolean(v, "data.eval.stratify"); ok {
				e.Stratify = b
			}
		case "seed":
			splitNode = k
			if x, ok := d.integer(v, "data.eval.seed"); ok {
				if x < 0 {
					d.errorf(v, "data.eval.seed must be >= 0, got %d", x)
				}
				u := uint64(x)
				e.Seed = &u
			}
		case "csv":
			csvNode = k
			if s, ok := d.str(v, "data.eval.csv"); ok {
				if !filepath.IsAbs(s) {
					s = filepath.Join(dir, s)
				}
				e.CSV = s
				if st, err := os.Stat(s); err != nil {
					d.errorf(v, "held-out data file %s cannot be read: %v", s, errText(err))
				} else if st.IsDir() {
					d.errorf(v, "held-out data file %s is a directory", s)
				}
			}
		case "fraction":
			fracNode = k
			if x, ok := d.number(v, "data.eval.fraction"); ok {
				if !(x > 0 && x < 1) {
					d.errorf(v, "data.eval.fraction must be between 0 and 1 (the share of the rows held out, e.g. 0.2), got %v", x)
				}
				e.Fraction = x
			}
		}
	})
	switch {
	case csvNode != nil && splitNode != nil:
		d.errorf(splitNode, "data.eval.%s draws the rows of a held-out fraction, and a held-out file (line %d) is read whole; remove it", splitNode.Value, csvNode.Line)
	case csvNode != nil && fracNode != nil:
		d.errorf(fracNode, "data.eval has both csv (line %d) and fraction; keep one of them", csvNode.Line)
	case csvNode == nil && fracNode == nil && n.Kind == yaml.MappingNode:
		d.errorf(n, "data.eval needs `csv: FILE` (a held-out file with the training file's columns) or `fraction: F` (hold out that share of the rows, drawn by data.seed)")
	}
	return e
}

// checkEval checks data.eval against the rest of the data section.
func (d *decoder) checkEval(data *Data, evalNode *yaml.Node) {
	e := data.Eval
	if e == nil || e.CSV != "" && e.Fraction > 0 { // both: reported in eval
		return
	}
	switch {
	case e.CSV != "" && data.CSV == "":
		d.errorf(evalNode, "data.eval.csv needs a csv training source (synthetic data has no file columns); use eval: {fraction: F} to hold out generated rows")
	case e.Fraction > 0 && data.Stream:
		d.errorf(evalNode, "data.eval.fraction cannot be used with stream: true: holding out rows of a streamed file would need them all in memory; split the file beforehand and give eval: {csv: HELD_OUT_FILE}")
	case e.Stratify && (data.Label == nil || data.Label.Float):
		d.errs = append(d.errs, Errorf(e.stratifyPos, "data.eval.stratify holds out a share of each class, and the data has no label of class ids; remove it (or give data.label class ids)"))
	case e.Stratify && data.Label.Vocab != nil && data.Label.Vocab.File == "":
		d.errs = append(d.errs, Errorf(e.stratifyPos, "data.eval.stratify needs the classes before the rows are split, and data.label's vocabulary is built from the training rows; give the label vocab: FILE (its classes, one a line), or remove stratify"))
	}
}

// checkEvalEvery refuses train.eval_every without held-out data.
func (d *decoder) checkEvalEvery(g *Graph) {
	if t := g.Train; t != nil && t.EvalEvery > 0 && (g.Data == nil || g.Data.Eval == nil) {
		d.errs = append(d.errs, Errorf(t.evalEveryPos, "train.eval_every needs held-out data to evaluate: add eval: {fraction: 0.2} or eval: {csv: FILE} to data"))
	}
}

// Suggest is " (did you mean X?)" for the candidate nearest to name, or "".
func Suggest(name string, candidates []string) string { return suggest(name, candidates) }
