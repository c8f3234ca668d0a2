package dsl

import (
	"fmt"
	"reflect"
)

// Tests of dsl compare graphs with Diff: Marshal then Load must give back
// the graph that was written.

// Diff describes the first difference between two graphs, ignoring
// positions and the file name, or returns "" when they are equal: the same
// variables (kind, dtype, shape, init, place, of, block), ops in the same
// order (type, inputs, outputs, attributes, section, param, place), assigns,
// data source and training configuration.
func Diff(a, b *Graph) string {
	if a.Name != b.Name {
		return fmt.Sprintf("name %q vs %q", a.Name, b.Name)
	}
	if len(a.Vars) != len(b.Vars) {
		return fmt.Sprintf("%d vs %d variables", len(a.Vars), len(b.Vars))
	}
	for _, n := range a.Order {
		va, vb := a.Vars[n], b.Vars[n]
		if vb == nil {
			return fmt.Sprintf("variable %q is missing", n)
		}
		if d := diffVar(va, vb); d != "" {
			return fmt.Sprintf("variable %q: %s", n, d)
		}
	}
	if len(a.Ops) != len(b.Ops) {
		return fmt.Sprintf("%d vs %d ops", len(a.Ops), len(b.Ops))
	}
	for i, oa := range a.Ops {
		ob := b.Ops[i]
		if oa.Type != ob.Type || !reflect.DeepEqual(oa.Inputs, ob.Inputs) || !reflect.DeepEqual(oa.Outputs, ob.Outputs) ||
			oa.Section != ob.Section || oa.Param != ob.Param || oa.Place != ob.Place || !equalAttrs(oa.Attrs, ob.Attrs) {
			return fmt.Sprintf("op %d: %s%v->%v %v %s %q vs %s%v->%v %v %s %q", i,
				oa.Type, oa.Inputs, oa.Outputs, oa.Attrs, oa.Section, oa.Param,
				ob.Type, ob.Inputs, ob.Outputs, ob.Attrs, ob.Section, ob.Param)
		}
	}
	if len(a.Assigns) != len(b.Assigns) {
		return fmt.Sprintf("%d vs %d assigns", len(a.Assigns), len(b.Assigns))
	}
	for i, x := range a.Assigns {
		if y := b.Assigns[i]; x.Target != y.Target || x.Value != y.Value {
			return fmt.Sprintf("assign %d: %s=%s vs %s=%s", i, x.Target, x.Value, y.Target, y.Value)
		}
	}
	if (a.Data == nil) != (b.Data == nil) {
		return "one graph has data, the other not"
	}
	if a.Data != nil {
		da, db := *a.Data, *b.Data
		da.Pos, db.Pos = Pos{}, Pos{}
		da.NormalizePos, db.NormalizePos = Pos{}, Pos{}
		da.headerLine, db.headerLine = 0, 0
		strip := func(c *Column) *Column {
			if c == nil {
				return nil
			}
			cc := *c
			cc.Pos, cc.rangePos, cc.fillPos, cc.sepPos, cc.refs, cc.rangeKey, cc.what = Pos{}, Pos{}, Pos{}, Pos{}, nil, "", ""
			if cc.Vocab != nil {
				v := *cc.Vocab
				v.Pos = Pos{}
				cc.Vocab = &v
			}
			return &cc
		}
		for _, d := range []*Data{&da, &db} {
			d.Label = strip(d.Label)
			for _, list := range []*[]*Column{&d.Features, &d.IDs} {
				out := make([]*Column, len(*list))
				for i, c := range *list {
					out[i] = strip(c)
				}
				if *list == nil {
					out = nil
				}
				*list = out
			}
		}
		for _, e := range []**Eval{&da.Eval, &db.Eval} {
			if *e != nil {
				ee := **e
				ee.Pos, ee.stratifyPos = Pos{}, Pos{}
				*e = &ee
			}
		}
		if !reflect.DeepEqual(da, db) {
			return fmt.Sprintf("data %+v vs %+v", da, db)
		}
	}
	if (a.Train == nil) != (b.Train == nil) {
		return "one graph has train, the other not"
	}
	if ta, tb := a.Train, b.Train; ta != nil {
		if ta.Loss != tb.Loss || !reflect.DeepEqual(ta.Metrics, tb.Metrics) || ta.Batch != tb.Batch || ta.Steps != tb.Steps || ta.Epochs != tb.Epochs {
			return fmt.Sprintf("train %s %v batch %d steps %d epochs %d vs %s %v batch %d steps %d epochs %d", ta.Loss, ta.Metrics, ta.Batch, ta.Steps, ta.Epochs, tb.Loss, tb.Metrics, tb.Batch, tb.Steps, tb.Epochs)
		}
		if ta.EvalEvery != tb.EvalEvery {
			return fmt.Sprintf("train.eval_every %d vs %d", ta.EvalEvery, tb.EvalEvery)
		}
	}
	return ""
}

func diffVar(a, b *Var) string {
	switch {
	case a.Kind != b.Kind:
		return fmt.Sprintf("kind %s vs %s", a.Kind, b.Kind)
	case a.DType != b.DType:
		return fmt.Sprintf("dtype %s vs %s", a.DType, b.DType)
	case !a.Shape.Equal(b.Shape):
		return fmt.Sprintf("shape %v vs %v", a.Shape, b.Shape)
	case a.Place != b.Place || a.Of != b.Of:
		return fmt.Sprintf("place/of %q/%q vs %q/%q", a.Place, a.Of, b.Place, b.Of)
	case (a.Init == nil) != (b.Init == nil):
		return "init set on one side only"
	case a.Init != nil && (a.Init.Type != b.Init.Type || !equalAttrs(a.Init.Attrs, b.Init.Attrs)):
		return fmt.Sprintf("init %s %v vs %s %v", a.Init.Type, a.Init.Attrs, b.Init.Type, b.Init.Attrs)
	case (a.Block == nil) != (b.Block == nil):
		return "block set on one side only"
	case a.Block != nil && (a.Block.Of != b.Block.Of || a.Block.Start != b.Block.Start || a.Block.End != b.Block.End || !a.Block.Shape.Equal(b.Block.Shape)):
		return fmt.Sprintf("block %+v vs %+v", *a.Block, *b.Block)
	}
	return ""
}

func equalAttrs(a, b map[string]any) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || !reflect.DeepEqual(v, w) {
			return false
		}
	}
	return true
}
