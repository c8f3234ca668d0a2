package program

import (
	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/tensor"
)

// Feeder writes batches into the data variables of a scope: Dst holds the
// scope's tensor of each of the data spec's variables, in data order (nil
// where the program has none).
type Feeder struct{ Dst []*tensor.Tensor }

// NewFeeder is the feeder of g's data into scope s.
func NewFeeder(g *dsl.Graph, s Scope) *Feeder { return FeederOf(g.Data, s) }

// FeederOf is the feeder of data spec d, which may differ from the
// graph's (prediction reads no label).
func FeederOf(d *dsl.Data, s Scope) *Feeder {
	f := &Feeder{}
	if d != nil {
		for _, c := range d.Columns() {
			f.Dst = append(f.Dst, s[c.Name])
		}
	}
	return f
}

// Fill writes rows [start, start+batch) of the stream (data.Batches).
func (f *Feeder) Fill(st data.Batches, start int64) error {
	return st.Fill(start, f.Dst)
}

// Empty says whether the program reads none of the data variables.
func (f *Feeder) Empty() bool {
	for _, t := range f.Dst {
		if t != nil {
			return false
		}
	}
	return true
}

// CopyPrefix copies the first rows of src's tensors into f's smaller ones
// (row-major: the first n rows are a prefix): a file's shorter last chunk.
func (f *Feeder) CopyPrefix(src *Feeder) {
	for i, dst := range f.Dst {
		if dst != nil {
			copy(dst.F, src.Dst[i].F)
			copy(dst.I, src.Dst[i].I)
			copy(dst.L, src.Dst[i].L)
		}
	}
}
