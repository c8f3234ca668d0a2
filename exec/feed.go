package exec

import (
	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/tensor"
)

// feeder writes batches into the data variables of a scope.
type feeder struct{ features, labels, ids *tensor.Tensor }

func newFeeder(g *dsl.Graph, s Scope) *feeder {
	f := &feeder{}
	if d := g.Data; d != nil {
		if d.Features != nil {
			f.features = s[d.Features.Name]
		}
		if d.Label != nil {
			f.labels = s[d.Label.Name]
		}
		if d.IDs != nil {
			f.ids = s[d.IDs.Name]
		}
	}
	return f
}

func (f *feeder) fill(st data.Batches, start int64) error {
	return st.Fill(start, f.features, f.labels, f.ids)
}
