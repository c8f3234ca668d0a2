package dsl

import (
	"fmt"

	"gopkg.in/yaml.v3"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
)

// Pos is a position in a model file.
type Pos struct {
	File      string
	Line, Col int
}

func (p Pos) String() string {
	switch {
	case p.File == "":
		return "<generated>"
	case p.Line == 0:
		return p.File
	}
	return fmt.Sprintf("%s:%d:%d", p.File, p.Line, p.Col)
}

// Section marks which part of the training step an op belongs to. The graph
// converter finds optimizer subgraphs through these marks.
type Section uint8

const (
	Forward Section = iota
	Backward
	Optimize
)

var sectionNames = [...]string{"forward", "backward", "optimize"}

func (s Section) String() string { return sectionNames[s] }

// ParseSection maps a section name to a Section.
func ParseSection(s string) (Section, bool) {
	for i, n := range sectionNames {
		if n == s {
			return Section(i), true
		}
	}
	return 0, false
}

// VarKind tells where a variable's value comes from.
type VarKind uint8

const (
	KindTemp  VarKind = iota // produced by an op every step
	KindData                 // fed from the data set every step
	KindParam                // trainable, persistent across steps
	KindState                // persistent, not trained (optimizer state)
)

var kindNames = [...]string{"temp", "data", "param", "state"}

func (k VarKind) String() string { return kindNames[k] }

// Persistent reports whether values survive from one step to the next.
func (k VarKind) Persistent() bool { return k == KindParam || k == KindState }

// Init is a variable initializer.
type Init struct {
	Type  string
	Attrs ops.Attrs
	Pos   Pos
}

// Var is a declared variable: data, parameter or state. Temporaries are
// not declared; their types come from shape inference.
type Var struct {
	Name  string
	Kind  VarKind
	DType ir.DType
	// Shape may hold -1 for the batch dimension of data variables.
	Shape ir.Shape
	Init  *Init
	// Place is an optional placement override: "trainer", "pserver" or "pserver:<i>".
	Place string
	// Of names the parameter a state variable belongs to (optimizer state).
	Of string
	// Block is set when the variable holds only some rows of a larger
	// parameter or state variable (a block cut by `psgraph split`).
	Block *Block
	// Optimizer is a parameter's own optimizer (params.P.optimizer), which
	// overrides train.optimizer for it; nil: train.optimizer.
	Optimizer *Optimizer
	// Dynamic makes a parameter a dynamic table (params.P.dynamic): its
	// Shape is [ir.DynamicRows, Dynamic.Dim].
	Dynamic *Dynamic
	Pos     Pos
}

// Block describes a row block: rows [Start, End) along dim 0 of the
// variable Of, whose whole shape is Shape; with Stride > 1 every Stride-th
// of them (Start, Start+Stride, ...: the shard of a table sharded by row
// id mod Stride). A block initializes to exactly those rows of the values
// the whole variable would get.
type Block struct {
	Of         string
	Start, End int
	Stride     int // 0 or 1: every row
	Shape      ir.Shape
	Pos        Pos
}

// Step is the distance between the block's rows (1 when contiguous).
func (b *Block) Step() int { return max(b.Stride, 1) }

// Rows is the number of rows the block holds.
func (b *Block) Rows() int { return (b.End - b.Start + b.Step() - 1) / b.Step() }

// InitTarget returns what an initializer fills for v: the name that seeds
// it, the whole shape (nil: v's own), the first row and the distance
// between rows. For a block these
// are the whole variable's, so placement never changes the initial model.
func (v *Var) InitTarget() (name string, full ir.Shape, rowStart, rowStep int) {
	if b := v.Block; b != nil {
		return b.Of, b.Shape, b.Start, b.Step()
	}
	return v.Name, nil, 0, 1
}

// Op is one operation of the graph.
type Op struct {
	Type    string
	Inputs  []string
	Outputs []string
	Attrs   ops.Attrs
	Section Section
	// Param names the parameter whose gradient or update this op computes
	// (set by autodiff and optimizer expansion); "" otherwise.
	Param string
	Place string
	Pos   Pos

	// raw attributes of a template op, converted when the template is instantiated
	raw   map[string]*yaml.Node
	rawAt *yaml.Node
}

// Assign moves a value into a persistent variable for the next step.
type Assign struct {
	Target, Value string
	Pos           Pos
}

// Column selects CSV columns for a data variable.
type Column struct {
	Name string
	// Cols are the file columns the variable reads, in order (counting
	// from 0): a CSV's fields, or the places of a tfrecord's or parquet
	// file's named columns in Data.Names.
	Cols []int
	// HashCols, when set, number the hash spaces of Cols instead of
	// themselves: a held-out or prediction file whose columns stand
	// elsewhere than the model's data file's hashes them as training did.
	HashCols []int
	Pos      Pos
	// Fill stands in for an empty field (features and unhashed ids); nil:
	// an empty field is an error.
	Fill *float64
	// Transform is applied to feature values before normalization: "" (none)
	// or "log" (v > 0 becomes ln(1+v)).
	Transform string
	// HashBuckets > 0 hashes each id field's bytes into [0, HashBuckets)
	// (the hash of exec/data/hash.go); 0 reads the ids as integers, taken as they are.
	HashBuckets int
	// KeyType, for ids: "" reads int32 ids; KeyHash64 or KeyInt64 reads int64
	// keys instead (a variable of dtype int64): each field's bytes hashed
	// to 64 bits with no bucket space (exec/data/hash.go), or each field an
	// integer of the int64 range, taken as it is (ir.PadKey excepted).
	KeyType string
	// FillKey is the exact fill of an ids spec with KeyType KeyInt64 (Fill
	// holds it as a float, which cannot hold every int64).
	FillKey int64
	// SharedSpace, for hashed ids: the column is not mixed into the hash, so
	// a string is the same id in every column of the spec (and of every
	// other shared spec with the same HashBuckets, or with key: hash64).
	SharedSpace bool
	// NumIDs > 0, for integer ids: every id is below it (a larger one is an
	// error in the data file), so a table read through them needs NumIDs
	// rows. 0: not stated.
	NumIDs int
	// Separator != 0 makes a multi-valued ids column: one column whose
	// field holds several ids separated by Separator, read into MaxLen
	// slots padded with -1 (the first MaxLen ids of a longer field are
	// kept, and the field is counted as truncated).
	Separator byte
	MaxLen    int
	// Float, for a label: its values are float32 targets [batch, Hi-Lo]
	// (dtype: float32; regression, binary cross entropy) instead of int32
	// class ids [batch].
	Float bool
	// Positive, for a label: the values that are the positive class (1);
	// every other value is 0 (positive: VALUE or a list).
	Positive []string
	// Threshold, for a label: a number at least Threshold is 1, below it 0.
	Threshold *float64
	// Vocab maps a field's string to an id: for ids (a table's rows) and
	// a label (class ids); nil: none.
	Vocab *Vocab

	rangePos Pos    // of the column/columns value
	what     string // the spec's name in messages: data.ids, data.ids[1]
	sepPos   Pos    // of the separator key
	// isFeatures: a features spec (float32 values) rather than ids or a label
	isFeatures bool
	fillPos    Pos      // of the fill key
	maxLenPos  Pos      // of a max_len key without separator
	refs       []colRef // the columns as written, resolved into Cols
	rangeKey   string   // "column" or "columns"
}

// Vocab is a vocabulary (data.ids or data.label vocab): a field's string
// is its id, from a file (one value a line, the line's place its id) or
// built from the training rows (the values seen at least MinCount times).
// OOV buckets hold the values it lacks: their ids, hashed, follow its
// size. Its words are known once it is read or built (exec/data).
type Vocab struct {
	File     string // resolved path; "" for a vocabulary built from the data
	MinCount int    // built: the fewest times a value is seen to be in it
	MaxSize  int    // built: at most that many values (0: no bound)
	OOV      int    // buckets of out-of-vocabulary values (0: such a value is an error)
	// Shared: one built vocabulary over all the spec's columns
	// (shared_space: true) rather than one per column.
	Shared bool
	// Words is the vocabulary of a file, read when the model is loaded.
	Words []string
	Pos   Pos
}

// colRef is a column as a spec writes it: a name, a number, or a range
// of either (from..to, both ends included).
type colRef struct {
	name string
	num  int // -1 for a name
	to   *colRef
}

// The values of an ids spec's key (Column.KeyType).
const (
	KeyHash64 = "hash64" // each field's bytes hashed to a 64-bit key
	KeyInt64  = "int64"  // each field an int64, taken as it is
	KeyUint64 = "uint64" // each field an unsigned 64-bit integer, its bits as an int64
)

// KeyNames are the values of an ids spec's key.
var KeyNames = []string{KeyHash64, KeyInt64, KeyUint64}

// IDType is the dtype of an ids spec's variable: int32 ids, or int64 keys
// with key.
func (c *Column) IDType() ir.DType {
	if c.KeyType != "" {
		return ir.I64
	}
	return ir.I32
}

// Key is the spec's place in the data section, as messages name it:
// data.features, data.label, data.ids, or data.ids[1] in a list of specs.
func (c *Column) Key() string { return c.what }

// Width is the number of values the variable holds per row: the columns
// of its range, or MaxLen for a multi-valued column.
func (c *Column) Width() int {
	if c.MaxLen > 0 {
		return c.MaxLen
	}
	return len(c.Cols)
}

// Col is the file column the variable's value i is read from.
func (c *Column) Col(i int) int { return c.Cols[i] }

// IDBound is the number of ids the spec can yield, ids being in [0,
// IDBound): its HashBuckets or NumIDs; 0 when unknown (integer ids without
// num_ids).
func (c *Column) IDBound() int {
	if c.HashBuckets > 0 {
		return c.HashBuckets
	}
	if c.Vocab != nil && c.Vocab.File != "" {
		return c.Vocab.Size(len(c.Cols))
	}
	if c.Vocab != nil && c.Vocab.MaxSize > 0 {
		return c.Vocab.Size(len(c.Cols))
	}
	return c.NumIDs
}

// Size is the ids of a vocabulary over cols columns: its words (a file's,
// or a built one's MaxSize) and OOV buckets, once for a file's (one
// vocabulary for all the columns) and per column for a built one unless
// shared (spaces side by side); 0 when not known before the data is read.
func (v *Vocab) Size(cols int) int {
	if v.File != "" {
		return len(v.Words) + v.OOV
	}
	if v.MaxSize == 0 {
		return 0
	}
	if v.Shared {
		cols = 1
	}
	return (v.MaxSize + v.OOV) * cols
}

// Data describes the data source.
type Data struct {
	// CSV is the resolved path of the data file, whatever its Format.
	CSV string
	// Format is the file's: "" (delimited text), "tfrecord" or "parquet".
	Format string
	// Names are the file's column names, by position: a CSV's header line
	// or names:, a parquet file's columns; for a tfrecord, the feature
	// keys of names:, or those the data section names in order of first
	// mention. nil: a CSV without names.
	Names []string
	// headerLine is the line of the header Names come from (0: none; -1:
	// the names were unusable, reported).
	headerLine int
	Synthetic  *Synthetic
	// Features and IDs are the features and ids specs, in file order: one
	// for the mapping form (features: {...}), several for the list form.
	Features  []*Column
	Label     *Column
	IDs       []*Column
	Normalize string
	// NormalizePos is where normalize is given (zero: not given, none).
	NormalizePos Pos
	Shuffle      bool
	Seed         uint64
	// Delimiter separates the fields of a line (default ',').
	Delimiter byte
	// Stream reads the file from disk as training goes instead of loading
	// it into memory.
	Stream bool
	// Header: the file's first non-blank line names the columns; it is not
	// a row. Columns may then be given by name.
	Header bool
	// Eval is the held-out data (data.eval); nil: none.
	Eval *Eval
	// Online is the online source (kafka, csv: "-", a directory, follow:
	// true); nil: a file read whole or in epochs, or synthetic rows.
	Online *Online
	Pos    Pos
}

// Columns lists the specs of the data variables in the order a batch's
// tensors are given to a data reader (data.Batches.Fill): the features
// specs, the label, the ids specs.
func (d *Data) Columns() []*Column {
	out := append([]*Column{}, d.Features...)
	if d.Label != nil {
		out = append(out, d.Label)
	}
	return append(out, d.IDs...)
}

// Synthetic describes a generated, learnable classification task.
type Synthetic struct {
	Rows, Features, Classes int
	Seed                    uint64
}

// Optimizer is the optimizer a model names, before expansion.
type Optimizer struct {
	Type  string             // built-in name, or "" for a user-defined template
	Hyper map[string]float64 // lr and the other hyper-parameters
	Tmpl  *Template          // user-defined update subgraph
	// Schedule, when set, makes the learning rate a function of the step
	// (lr: {schedule: ...}); Hyper["lr"] is the rate it scales.
	Schedule *Schedule
	Pos      Pos
}

// Schedule is a built-in learning-rate schedule (lr: {schedule: KIND, ...}),
// expanded into ops over the step (docs/dsl.md, "Learning-rate schedules").
type Schedule struct {
	Kind   string // constant, cosine, step or exponential
	Warmup int    // linear warmup steps (0: none)
	Steps  int    // cosine: the step at which the rate reaches MinLR
	MinLR  float64
	Gamma  float64 // step and exponential: the factor
	Every  int     // step: the rate is multiplied by Gamma every Every steps
	Pos    Pos
}

// Train holds the training configuration.
type Train struct {
	Loss    string
	Metrics []string
	// LossPos and MetricPos locate train.loss and each train.metrics entry.
	LossPos   Pos
	MetricPos []Pos
	Batch     int
	Steps     int
	// Epochs, instead of Steps: passes over the data set; a run's steps are
	// ceil(Epochs x rows / (batch x trainers)) (exec.StepsOf).
	Epochs    int
	Optimizer *Optimizer
	// EvalEvery > 0 evaluates data.eval every EvalEvery steps (and at the
	// end, as always when data.eval is set).
	EvalEvery int
	// Clip clips the gradients before the optimizer sees them (nil: no clipping).
	Clip         *Clip
	Pos          Pos
	evalEveryPos Pos
}

// Clip is train.clip: gradient clipping as torch.nn.utils does it, before
// the optimizer's update (and its weight decay).
type Clip struct {
	// Value > 0 clips every gradient element to [-Value, Value] (clip_grad_value_).
	Value float64
	// Norm > 0 scales all gradients by min(1, Norm / (||g|| + 1e-6)), ||g||
	// the 2-norm over every parameter's gradient (clip_grad_norm_).
	Norm float64
	Pos  Pos
}

// Graph is a model: declared variables, ops and training configuration.
// After Load it is expanded (backward and optimizer ops present) and
// shape-checked.
type Graph struct {
	File    string
	Name    string
	Data    *Data
	Vars    map[string]*Var
	Order   []string // declaration order of Vars
	Ops     []*Op
	Assigns []Assign
	Train   *Train
	// Types holds the type of every variable at the training batch size.
	Types map[string]ops.Type
}

// NewOp builds an op of a catalog type with every default attribute
// filled in, as Parse fills them, so that a written file reads back into
// the same op; attrs override the defaults. Autodiff, the optimizer
// expansion and split build their ops with it.
func NewOp(typ string, inputs, outputs []string, attrs ops.Attrs, section Section, pos Pos) *Op {
	return newOpIn(new(Op), typ, inputs, outputs, attrs, section, pos)
}

// newOpIn is NewOp building the op in op (from a slab).
func newOpIn(op *Op, typ string, inputs, outputs []string, attrs ops.Attrs, section Section, pos Pos) *Op {
	*op = Op{Type: typ, Inputs: inputs, Outputs: outputs, Attrs: attrs, Section: section, Pos: pos}
	switch shared, ok := sharedDefaults[typ]; {
	case len(attrs) == 0 && ok:
		op.Attrs = shared
	case complete(typ, attrs): // every default overridden: the op keeps attrs
	default:
		full := DefaultAttrs(typ, len(attrs))
		for k, v := range attrs {
			full[k] = v
		}
		op.Attrs = full
	}
	return op
}

// complete reports whether attrs sets exactly the attributes of op type
// typ's catalog entry, so that filling in the defaults would copy it
// unchanged: NewOp then shares it (no op's attribute map is changed after
// it is built), as autodiff's matmuls share four maps of transposes.
func complete(typ string, attrs ops.Attrs) bool {
	def, ok := ops.Lookup(typ)
	if !ok || len(attrs) != len(def.Attrs) {
		return false
	}
	for _, a := range def.Attrs {
		if _, ok := attrs[a.Name]; !ok {
			return false
		}
	}
	return true
}

// sharedDefaults holds each op type's default attributes, for the ops
// NewOp builds without attributes of their own (most of autodiff's): no
// op's attribute map is changed after it is built, so they share one.
var sharedDefaults = func() map[string]ops.Attrs {
	m := map[string]ops.Attrs{}
	for _, n := range ops.Names() {
		m[n] = DefaultAttrs(n, 0)
	}
	return m
}()

// DefaultAttrs returns a new attribute map holding op type typ's default
// attributes, with room for extra more; NewOp and split's ops start from it.
// The extra are mostly the type's own attributes, so the room is that of
// the larger of the two: a map of up to 8 is one group, and split's sends
// (5 attributes, 5 given) would otherwise each get a table of 16 slots.
func DefaultAttrs(typ string, extra int) ops.Attrs {
	def, ok := ops.Lookup(typ)
	if !ok {
		return make(ops.Attrs, extra)
	}
	full := make(ops.Attrs, max(len(def.Attrs), extra))
	for _, a := range def.Attrs {
		if a.Default != nil {
			full[a.Name] = a.Default
		}
	}
	return full
}

// AddVar declares a variable.
func (g *Graph) AddVar(v *Var) {
	if g.Vars == nil {
		g.Vars = map[string]*Var{}
	}
	g.Vars[v.Name] = v
	g.Order = append(g.Order, v.Name)
}

// Params lists parameter names in declaration order.
func (g *Graph) Params() []string {
	var out []string
	for _, n := range g.Order {
		if g.Vars[n].Kind == KindParam {
			out = append(out, n)
		}
	}
	return out
}

// OptimizerOf returns the optimizer of parameter p: its own
// (params.P.optimizer), else train.optimizer; nil when it has neither.
func (g *Graph) OptimizerOf(p string) *Optimizer {
	if v := g.Vars[p]; v != nil && v.Optimizer != nil {
		return v.Optimizer
	}
	if g.Train != nil {
		return g.Train.Optimizer
	}
	return nil
}

// ParamOptimizers lists the parameters that have an optimizer of their
// own (params.P.optimizer), in declaration order.
func (g *Graph) ParamOptimizers() []string {
	var out []string
	for _, n := range g.Order {
		if v := g.Vars[n]; v.Kind == KindParam && v.Optimizer != nil {
			out = append(out, n)
		}
	}
	return out
}

// HasOptimizer reports whether the model names an optimizer:
// train.optimizer or a parameter's own.
func (g *Graph) HasOptimizer() bool {
	return g.Train != nil && g.Train.Optimizer != nil || len(g.ParamOptimizers()) > 0
}

// Batch returns the training batch size (0 without a train section).
func (g *Graph) Batch() int {
	if g.Train == nil {
		return 0
	}
	return g.Train.Batch
}

// GradName is the name of the gradient of x (ops.GradName).
func GradName(x string) string { return ops.GradName(x) }

// HasBlocksOf reports whether the graph holds row blocks of variable name.
func (g *Graph) HasBlocksOf(name string) bool {
	for _, v := range g.Vars {
		if v.Block != nil && v.Block.Of == name {
			return true
		}
	}
	return false
}
