package program

import (
	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/tensor"
)

// feeder writes batches into the data variables of a scope.
type Feeder struct{ Features, Labels, IDs *tensor.Tensor }

func NewFeeder(g *dsl.Graph, s Scope) *Feeder {
	f := &Feeder{}
	if d := g.Data; d != nil {
		if d.Features != nil {
			f.Features = s[d.Features.Name]
		}
		if d.Label != nil {
			f.Labels = s[d.Label.Name]
		}
		if d.IDs != nil {
			f.IDs = s[d.IDs.Name]
		}
	}
	return f
}

func (f *Feeder) Fill(st data.Batches, start int64) error {
	return st.Fill(start, f.Features, f.Labels, f.IDs)
}
