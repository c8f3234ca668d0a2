package ops

import (
	"fmt"

	"github.com/psgraph/psgraph/dsl/ir"
)

// Communication and queue ops. `psgraph split` inserts send, recv and
// accumulate on every edge that crosses a node boundary; enqueue and dequeue
// are node-local bounded queues that model files may use directly. Their
// kernels (exec/kernels) only call the Runtime, so the same op runs over
// TCP, over the in-memory transport in tests, or fails clearly in a local
// run.

func parseDType(s string) (ir.DType, error) {
	switch s {
	case "", "f32", "float32":
		return ir.F32, nil
	case "i32", "int32":
		return ir.I32, nil
	case "i64", "int64":
		return ir.I64, nil
	}
	return 0, fmt.Errorf("dtype %q must be f32, i32 or i64", s)
}

// inferFromShapeAttr types an op whose output is described by its attrs.
func inferFromShapeAttr(_ []Type, a Attrs) ([]Type, error) {
	dt, err := parseDType(a.String("dtype"))
	if err != nil {
		return nil, err
	}
	s := ir.Shape(a.Ints("shape")).Clone()
	for _, d := range s {
		if d <= 0 && d != -1 {
			return nil, Errorf("shape %v: dimensions must be positive (-1 for the batch)", s)
		}
	}
	return []Type{{DType: dt, Shape: s}}, nil
}

func checkPeerAttr(a Attrs, name string) error {
	if !a.Has(name) {
		return nil
	}
	_, err := ir.ParseAttr(a.String(name))
	return err
}

var (
	attrVar   = AttrSpec{Name: "var", Kind: AttrString, Required: true, Doc: "transfer name: the variable or parameter block moved"}
	attrShape = AttrSpec{Name: "shape", Kind: AttrInts, Required: true, Doc: "shape of the tensor received (-1: the batch)"}
	attrDType = AttrSpec{Name: "dtype", Kind: AttrString, Default: "f32", Doc: "f32, i32 or i64"}
)

func init() {
	register(&Def{
		Name: "send", Transfer: true, On: ir.NoRole, Doc: "hands x to the node named by `to` under the transfer name `var`; never blocks on the network",
		Inputs: []string{"x"}, Outputs: []string{},
		Attrs: []AttrSpec{
			attrVar,
			{Name: "to", Kind: AttrString, Required: true, Doc: "pserver:<i>, trainer:<i>, or trainer (every trainer in sync mode, the piece's source in async mode)"},
			{Name: "step_offset", Kind: AttrInt, Default: 0, Doc: "the message is keyed for step + step_offset (a pserver serves step k+1's parameters after step k's update)"},
			{Name: "reply_to", Kind: AttrString, Doc: "async mode: send only to the trainer whose piece the accumulate of this transfer name consumed"},
			{Name: "initial", Kind: AttrString, Doc: "before step 0 the node sends this persistent variable's value under the same transfer name (a pserver serving initial parameters)"},
		},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			return []Type{}, checkPeerAttr(a, "to")
		},
		Stateful: true, Internal: true,
	}, &Def{
		Name: "recv", Transfer: true, On: ir.NoRole, Doc: "blocks until the transfer `var` from `from` for this step arrived, and outputs it",
		Outputs: []string{"y"},
		Attrs: []AttrSpec{
			attrVar,
			{Name: "from", Kind: AttrString, Required: true, Doc: "pserver:<i> or trainer:<i>"},
			attrShape, attrDType,
		},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			if err := checkPeerAttr(a, "from"); err != nil {
				return nil, err
			}
			return inferFromShapeAttr(in, a)
		},
		Blocking: true, Internal: true,
	}, &Def{
		Name: "accumulate", Transfer: true, On: ir.PServerRole, Doc: "blocks until `count` pieces of `var` for this step arrived from distinct trainers, and outputs their mean (sum, then 1/count)",
		Outputs: []string{"y"},
		Attrs: []AttrSpec{
			attrVar,
			{Name: "count", Kind: AttrInt, Required: true, Doc: "pieces per step: the trainer count in sync mode, 1 in async mode"},
			attrShape, attrDType,
		},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			if a.Int("count") < 1 {
				return nil, Errorf("count must be at least 1, got %d", a.Int("count"))
			}
			return inferFromShapeAttr(in, a)
		},
		Blocking: true, Internal: true,
	}, &Def{
		Name: "enqueue", Doc: "copies x into the node-local bounded queue `queue`; blocks while the queue is full",
		Inputs: []string{"x"}, Outputs: []string{},
		Attrs: []AttrSpec{
			{Name: "queue", Kind: AttrString, Required: true},
			{Name: "capacity", Kind: AttrInt, Default: 16},
		},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			if a.Int("capacity") < 1 {
				return nil, Errorf("capacity must be at least 1")
			}
			return []Type{}, nil
		},
		Stateful: true, Blocking: true,
	}, &Def{
		Name: "dequeue", Doc: "blocks until `min_count` items are in queue `queue`, removes them and outputs their mean",
		Outputs: []string{"y"},
		Attrs: []AttrSpec{
			{Name: "queue", Kind: AttrString, Required: true},
			{Name: "capacity", Kind: AttrInt, Default: 16},
			{Name: "min_count", Kind: AttrInt, Default: 1},
			attrShape,
		},
		Infer: func(in []Type, a Attrs) ([]Type, error) {
			if m, c := a.Int("min_count"), a.Int("capacity"); m < 1 || m > c {
				return nil, Errorf("min_count %d must be between 1 and capacity %d", m, c)
			}
			return inferFromShapeAttr(in, a)
		},
		Blocking: true,
	})
}
