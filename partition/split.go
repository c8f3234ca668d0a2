package partition

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ir"
)

// Mode is how pservers combine the trainers' gradients.
type Mode string

const (
	// Sync: every pserver waits for the gradients of all trainers for a step
	// and applies their mean.
	Sync Mode = "sync"
	// Async: every gradient is applied as it arrives.
	Async Mode = "async"
)

// DefaultMinBlockSize is the element count above which a parameter is cut.
const DefaultMinBlockSize = 1 << 20

// Options configures Split.
type Options struct {
	Trainers, PServers int
	Mode               Mode // "" means Sync
	// MinBlockSize: a parameter with more elements is cut into row blocks
	// (0 means DefaultMinBlockSize).
	MinBlockSize int
	// Endpoints optionally gives host:port per pserver, recorded in the plan.
	Endpoints []string
	// Source is the source model's path and SourceSHA256 the hash of its
	// bytes (HashSource); both are only recorded in the plan.
	Source, SourceSHA256 string
	// SeparateTables keeps one fetch and one row-gradient transfer per
	// fixed table instead of bundling every table's into one message per
	// pserver and direction (bundle.go): the plan before bundles, for
	// comparison.
	SeparateTables bool
}

// Node names used in placements and transfers.
const trainerNode = "trainer"

func pserverNode(i int) string { return ir.PServer(i).Attr() }

// BlockName is the variable name of row block j of parameter p.
func BlockName(p string, j int) string { return p + ".b" + strconv.Itoa(j) }

// group is one parameter with everything that lives beside it: its
// optimizer state, its optimize ops and its assigns.
type group struct {
	param    *dsl.Var
	state    []*dsl.Var
	ops      []*dsl.Op
	assigns  []dsl.Assign
	grad     string // the parameter's gradient
	computed bool   // some op computes grad
	pin      string // "", "trainer" or "pserver:<i>"
	pinPos   dsl.Pos
	pinBy    string
	blocks   []*block
	whole    string // why the parameter was not cut
	// table: read only through lookup_table or embedding_bag (a row
	// gradient), so it is sharded by row id mod M across every pserver
	// and fetched by id.
	table   bool
	maxRows int // the most rows one trainer fetches or sends per step
}

type block struct {
	g          *group
	name       string
	start, end int
	stride     int // a table's shard: rows start, start+stride, ... < end
	shape      ir.Shape
	bytes      int
	pserver    int
	grad       string // the block's gradient
}

func (b *block) cut() bool { return len(b.g.blocks) > 1 }

// Split cuts an expanded, checked graph into one trainer subgraph (shared
// by every trainer replica) and one subgraph per pserver, joined by send,
// recv and accumulate ops. It is a pure function of g and opt.
func Split(g *dsl.Graph, opt Options) (*Plan, error) {
	if err := opt.normalize(); err != nil {
		return nil, err
	}
	if g.Train == nil {
		return nil, dsl.Errorf(dsl.Pos{File: g.File}, "the model has no train section; split places a training job (add train: {loss, batch, optimizer})")
	}
	if g.Types == nil {
		if err := g.Check(); err != nil {
			return nil, err
		}
	}
	s := &splitter{g: g, opt: opt, groups: map[string]*group{}}
	if c := g.Train.Clip; c != nil && c.Norm > 0 {
		if opt.Mode == Async {
			return nil, dsl.Errorf(c.Pos, "train.clip.norm needs a sync job: it clips the norm of the trainers' mean gradient, and an async pserver applies each trainer's gradient alone; clip by value (train.clip: {value: V}) or split with --mode sync")
		}
		s.clipNorm, s.clipPos = c.Norm, c.Pos
	}
	steps := []func() error{s.collectGroups, s.checkEdges, s.applyPlaces, s.checkClipNorm, s.cutBlocks}
	for _, f := range steps {
		if err := f(); err != nil {
			return nil, err
		}
	}
	s.assignPServers()
	return s.build(), nil
}

func (o *Options) normalize() error {
	switch {
	case o.Trainers < 1:
		return fmt.Errorf("trainers must be at least 1, got %d", o.Trainers)
	case o.PServers < 1:
		return fmt.Errorf("pservers must be at least 1, got %d", o.PServers)
	case o.MinBlockSize < 0:
		return fmt.Errorf("min block size must be positive, got %d", o.MinBlockSize)
	case len(o.Endpoints) > 0 && len(o.Endpoints) != o.PServers:
		return fmt.Errorf("%d pserver endpoints given for %d pservers; give one host:port per pserver", len(o.Endpoints), o.PServers)
	}
	if o.Mode == "" {
		o.Mode = Sync
	}
	if o.Mode != Sync && o.Mode != Async {
		return fmt.Errorf("mode %q is not sync or async", o.Mode)
	}
	if o.MinBlockSize == 0 {
		o.MinBlockSize = DefaultMinBlockSize
	}
	return nil
}

type splitter struct {
	g      *dsl.Graph
	opt    Options
	groups map[string]*group
	names  []string // parameters with a group, sorted
	byName []*group // their groups, in that order
	sorted []string // every variable's name, sorted
	// owner is the group that holds a name (see collectGroups); shared
	// the other groups holding it, if any.
	owner  map[string]*group
	shared map[string][]*group
	nodes  []string // pserverNode(i)
	count  int      // the gradients an accumulate waits for
	// trainerOps are the forward and backward ops (and the ops of groups
	// placed on the trainer), in the source's order.
	trainerOps []*dsl.Op
	trainerAsg []dsl.Assign
	warnings   []string
	// clipNorm > 0: train.clip.norm. Each pserver sends the trainers its
	// blocks' sum of squares; every trainer adds them up into the clip
	// factor (dsl.ClipNormOps) and sends it back to every pserver, which
	// multiplies its blocks' mean gradients by it.
	clipNorm float64
	clipPos  dsl.Pos
}

// rename maps a group's names onto a block: p -> block, p@x -> block@x.
func rename(p, blk, name string) string {
	if p == blk {
		return name
	}
	if name == p {
		return blk
	}
	if rest, ok := strings.CutPrefix(name, p+"@"); ok {
		return blk + "@" + rest
	}
	return name
}

// attr is one attribute of an op built by split.
type attr struct {
	k string
	v any
}

// newOp builds an op with every default attribute filled in, as Parse
// would, so the written file reads back into the same op: dsl.NewOp
// without the map of the given attributes.
func newOp(typ string, inputs, outputs []string, pos dsl.Pos, attrs ...attr) *dsl.Op {
	full := dsl.DefaultAttrs(typ, len(attrs))
	for _, a := range attrs {
		full[a.k] = a.v
	}
	return &dsl.Op{Type: typ, Inputs: inputs, Outputs: outputs, Attrs: full, Section: dsl.Backward, Pos: pos}
}

func dtypeAttr(d ir.DType) string {
	switch d {
	case ir.I32:
		return "i32"
	case ir.I64:
		return "i64"
	}
	return "f32"
}
