package dsl

import (
	"os"
	"path/filepath"

	"gopkg.in/yaml.v3"
)

// Eval is a model's held-out data (data.eval): a second file with the
// training file's columns, or a fraction of the training rows drawn by
// data.seed. Evaluation uses the training split's normalization
// statistics.
type Eval struct {
	CSV      string  // resolved path; "" for a fraction
	Fraction float64 // in (0, 1); 0 for a file
	Pos      Pos
}

var evalKeys = []string{"csv", "fraction"}

// eval decodes data.eval: {csv: FILE} or {fraction: F}.
func (d *decoder) eval(n *yaml.Node, dir string) *Eval {
	e := &Eval{Pos: d.pos(n)}
	var csvNode, fracNode *yaml.Node
	d.fields(n, "data.eval", evalKeys, func(key string, k, v *yaml.Node) {
		switch key {
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
