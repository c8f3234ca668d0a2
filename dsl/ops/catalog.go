// Package ops is psgraph's op catalog: what each op is, not how it runs.
// Each op is one Def that keeps its signature, attributes, shape rule,
// gradient rule and the properties the converter and executor need
// (element-wise, blocking, stateful, internal, sparse inputs) together; the
// DSL loader validates against it, autodiff asks it for gradients and
// partition for attributes. Pure shape helpers that kernels need too
// (BroadcastShape, RowAxis, ...) live here as well.
//
// The kernels, and the contracts between kernels and the runtime, are in
// exec/kernels, registered under the same op names, in files named like
// the ones here (op_unary.go holds the unary rules; exec/kernels/op_unary.go
// their kernels). This package imports nothing under exec.
//
// The catalog is built once at init and never mutated after.
package ops

import (
	"fmt"
	"sort"

	"github.com/psgraph/psgraph/dsl/ir"
)

// Type is the static type of a variable: dtype and a concrete shape.
//
// A row-sparse value (a row gradient: SelectedRows in PaddlePaddle,
// IndexedSlices in TensorFlow) has MaxRows > 0: Shape is the dense shape
// [height, ...], and a step holds only some of its rows, at most MaxRows,
// each once. RowSet names the variable whose rows it holds: values with the
// same RowSet hold the same rows in the same order, so element-wise ops
// combine their values directly.
type Type struct {
	DType   ir.DType
	Shape   ir.Shape
	RowSet  string
	MaxRows int
}

// Sparse reports whether t is a row-sparse value.
func (t Type) Sparse() bool { return t.MaxRows > 0 }

// RowShape is the dense shape of a row-sparse value's values at their
// largest: [MaxRows, Shape[1:]...].
func (t Type) RowShape() ir.Shape {
	return append(ir.Shape{t.MaxRows}, t.Shape[1:]...)
}

// Same reports whether two types are equal, sparseness included.
func (t Type) Same(o Type) bool {
	return t.DType == o.DType && t.Shape.Equal(o.Shape) && t.RowSet == o.RowSet && t.MaxRows == o.MaxRows
}

func (t Type) String() string {
	if t.Sparse() {
		return fmt.Sprintf("%s%v rows<=%d of %s", t.DType, t.Shape, t.MaxRows, t.RowSet)
	}
	return t.DType.String() + t.Shape.String()
}

// F32 is shorthand for a float32 type of the given shape.
func F32(shape ...int) Type { return Type{DType: ir.F32, Shape: ir.Shape(shape)} }

// AttrKind is the type of an attribute value.
type AttrKind uint8

const (
	AttrFloat  AttrKind = iota + 1 // float64
	AttrInt                        // int
	AttrBool                       // bool
	AttrString                     // string
	AttrInts                       // []int
)

func (k AttrKind) String() string {
	return [...]string{"", "number", "integer", "bool", "string", "list of integers"}[k]
}

// AttrSpec declares one attribute of an op.
type AttrSpec struct {
	Name     string
	Kind     AttrKind
	Default  any // nil with Required false: the attribute is optional and absent
	Required bool
	Doc      string
}

// Attrs holds validated attribute values: float64, int, bool, string or []int.
type Attrs map[string]any

// Float returns a number attribute (ints are widened).
func (a Attrs) Float(name string) float64 {
	switch v := a[name].(type) {
	case float64:
		return v
	case int:
		return float64(v)
	}
	return 0
}

// Int returns an integer attribute.
func (a Attrs) Int(name string) int {
	switch v := a[name].(type) {
	case int:
		return v
	case float64:
		return int(v)
	}
	return 0
}

// Bool returns a bool attribute.
func (a Attrs) Bool(name string) bool { v, _ := a[name].(bool); return v }

// String returns a string attribute.
func (a Attrs) String(name string) string { v, _ := a[name].(string); return v }

// Ints returns a list attribute.
func (a Attrs) Ints(name string) []int { v, _ := a[name].([]int); return v }

// Has reports whether the attribute is set.
func (a Attrs) Has(name string) bool { _, ok := a[name]; return ok }

// Clone returns a shallow copy.
func (a Attrs) Clone() Attrs {
	c := make(Attrs, len(a))
	for k, v := range a {
		c[k] = v
	}
	return c
}

// GradBuilder is how a gradient rule adds backward ops to the graph.
type GradBuilder interface {
	// Emit appends an op and returns the name of its single (fresh) output.
	// The op may keep attrs as its attributes: attrs must not change after.
	Emit(typ string, inputs []string, attrs Attrs) string
	// Type returns the static type of a variable (at the nominal batch size).
	Type(name string) Type
}

// GradArgs describes the op being differentiated.
type GradArgs struct {
	Inputs, Outputs []string
	// OutGrads holds the gradient variable of each output, "" when no
	// gradient flows into that output.
	OutGrads []string
	// Need tells which inputs want a gradient.
	Need  []bool
	Attrs Attrs
}

// Def is one op in the catalog.
type Def struct {
	Name string
	Doc  string
	// Inputs and Outputs name the operands, for docs and error messages.
	// Variadic ops set MinInputs/MaxInputs (MaxInputs -1: unbounded).
	Inputs, Outputs      []string
	MinInputs, MaxInputs int
	// Variadic outputs (the bundled table ops) set MinOutputs/MaxOutputs
	// the same way.
	MinOutputs, MaxOutputs int
	Attrs                  []AttrSpec
	// Infer computes the output types from the input types and attrs.
	Infer func(in []Type, a Attrs) ([]Type, error)
	// Grad returns one gradient var name per input ("" for none). Nil means
	// the op is not differentiable (e.g. accuracy): no gradient flows through.
	Grad func(b GradBuilder, g GradArgs) []string
	// ElementWise ops read and write every tensor at the same flat index, so
	// they can run on a row block of a parameter as well as on the whole.
	ElementWise bool
	// View ops give input 0's values, unchanged and in their order, another
	// shape (reshape, reshape_like): a compiled program may make the output
	// a view of input 0's buffer, whose copy the kernel then skips.
	View bool
	// Blocking ops wait on other nodes or queues.
	Blocking bool
	// Stateful ops must not be pruned or reordered away (send, enqueue).
	Stateful bool
	// Transfer ops move tensors between the nodes of a job: a placed
	// graph's transfer table (dsl.Graph.Transfers) is what they send and
	// receive, and only a node of a job runs them, one of role On
	// (ir.NoRole: either role). dyn_serve and dyn_accumulate, what a
	// dynamic table's serve_rows and accumulate_rows are lowered to, are
	// transfer ops too: the table lists their transfers under the ops
	// before lowering.
	Transfer bool
	On       ir.Role
	// Internal ops are produced by autodiff or split; they are valid in
	// model files but listed apart in the docs.
	Internal bool
	// SparseIn ops read row-sparse inputs themselves (their Infer sees the
	// sparse types). An ElementWise op runs on the values of row-sparse
	// inputs that share one row set and yields a value with those rows;
	// any other op refuses a row-sparse input.
	SparseIn bool
	// ReadsTable ops read rows of input 0, a table [V, D], by the int32 ids
	// of input 1 (lookup_table, embedding_bag): the table's gradient through
	// them is a row gradient, computed by a RowGrad op, and split fetches
	// the rows of a sharded table by those ids (an id < 0 is padding, which
	// is not fetched).
	ReadsTable bool
	// RowGrad ops compute a table's row gradient (lookup_table_grad,
	// embedding_bag_grad): inputs dy, ids, table.
	RowGrad bool
	// Updates pairs inputs that are persistent state with the outputs
	// holding their next values (batch_norm's running statistics): the
	// DSL requires each such input to be a state variable assigned that
	// output, and no gradient flows into such an output.
	Updates []Update
}

// Update says that output Out of an op is the next value of its input In,
// a state variable.
type Update struct{ In, Out int }

// UpdateOutput reports whether output i of the op is a state's next value.
func (d *Def) UpdateOutput(i int) bool {
	for _, u := range d.Updates {
		if u.Out == i {
			return true
		}
	}
	return false
}

// NumInputs reports the allowed input count.
func (d *Def) NumInputs() (min, max int) {
	if d.MinInputs != 0 || d.MaxInputs != 0 {
		return d.MinInputs, d.MaxInputs
	}
	return len(d.Inputs), len(d.Inputs)
}

// NumOutputs reports the allowed output count.
func (d *Def) NumOutputs() (min, max int) {
	if d.MinOutputs != 0 || d.MaxOutputs != 0 {
		return d.MinOutputs, d.MaxOutputs
	}
	return len(d.Outputs), len(d.Outputs)
}

// OutputsOK reports whether n outputs are allowed.
func (d *Def) OutputsOK(n int) bool {
	lo, hi := d.NumOutputs()
	return n >= lo && (hi < 0 || n <= hi)
}

var catalog = map[string]*Def{}

func register(defs ...*Def) {
	for _, d := range defs {
		if _, dup := catalog[d.Name]; dup {
			panic("ops: duplicate op " + d.Name)
		}
		catalog[d.Name] = d
	}
}

// ReadsTable reports whether op name reads a table's rows by id (Def.ReadsTable).
func ReadsTable(name string) bool { d, ok := catalog[name]; return ok && d.ReadsTable }

// RowGrad reports whether op name computes a table's row gradient (Def.RowGrad).
func RowGrad(name string) bool { d, ok := catalog[name]; return ok && d.RowGrad }

// Lookup returns the op named name.
func Lookup(name string) (*Def, bool) {
	d, ok := catalog[name]
	return d, ok
}

// Names lists all ops, sorted.
func Names() []string {
	names := make([]string, 0, len(catalog))
	for n := range catalog {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Errorf builds a shape or attribute error; the DSL adds the position.
func Errorf(format string, args ...any) error { return fmt.Errorf(format, args...) }
