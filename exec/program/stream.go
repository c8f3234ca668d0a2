package program

import (
	"fmt"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/kernels"
	"github.com/psgraph/psgraph/exec/tensor"
)

// streamAlign is the granularity, in elements, at which a Streamer cuts
// its block. The vector kernels (exec/blas) run their SIMD body on the
// largest multiple of 16 elements of a slice and a Go loop on the rest,
// and the two may round differently (blas.Scale: one FMA in the body, a
// multiply and an add in the tail). Pieces that start at multiples of 64
// from the block start, and are multiples of 64 long unless they end the
// block, put every element through the same path as one pass over the
// whole block, so streaming stays bitwise equal to Program.Run.
const streamAlign = 64

// DefaultStreamChunk is a piece size (elements) for NewStreamer: 16 KiB per
// temporary, so a piece's gradient, param, state and temporaries stay in
// L1/L2 from one op to the next.
const DefaultStreamChunk = 4096

// Streamer applies one pserver part's update (accumulate, element-wise
// optimizer ops, send, assigns) chunk by chunk as the gradient arrives,
// instead of materializing the block-sized gradient and making one pass
// per op over block-sized temporaries. Per step: Begin, then Chunk for
// consecutive ranges covering the block, then End. Block-shaped state and
// the parameter are written in place; nothing block-sized is allocated.
//
// A Streamer shares its Program's persistent variables, scalar
// temporaries and the kernels of the ops that do not need the gradient;
// the Program's block-sized temporaries are not used (Program.Run still
// works and may be mixed with streamed steps). Like the Program, it is
// used by one goroutine at a time: the part's loop.
type Streamer struct {
	prog  *Program
	chunk *Program // the ops that depend on the gradient, compiled at piece shape
	begin []int    // prog.nodes run once per step before the chunks
	sends []streamSend
	// scalar assigns swap buffers at End, as Program.Run does; block
	// assigns copy each piece's new values into the persistent tensor.
	scalarAssigns [][2]*tensor.Tensor
	blockAssigns  []blockAssign
	grad          *tensor.Tensor // the chunk program's gradient: a window of the caller's slice
	views         []streamView   // the chunk program's windows on block persistents
	temps         []streamTemp   // the chunk program's own piece-sized temporaries
	info          StreamGrad
	piece         int // elements per piece: a multiple of streamAlign, or the whole block
	cur           int // length the temporaries are sliced to

	// per step
	rt     kernels.Runtime
	begun  bool
	next   int       // first element not yet passed to Chunk
	carry  []float32 // gradient of an aligned group a Chunk call left incomplete
	carryN int
}

// StreamGrad is the gradient a Streamer consumes: its part's accumulate op.
type StreamGrad struct {
	// Attrs are the accumulate op's own attributes (var, count, shape).
	Attrs ops.Attrs
	// Var is the transfer name, Count the pieces averaged per step (the
	// trainer count in sync mode, 1 in async).
	Var   string
	Count int
	// Shape, Elems and Bytes describe the block (float32).
	Shape tensor.Shape
	Elems int
	Bytes int
}

type streamSend struct {
	op     *dsl.Op
	kernel kernels.Kernel
}

type blockAssign struct {
	dst *tensor.Tensor // persistent, whole block
	val *tensor.Tensor // chunk program, one piece
}

type streamView struct {
	t   *tensor.Tensor // chunk program input
	src *tensor.Tensor // persistent, whole block (read through: Program.Run may swap its buffer)
}

type streamTemp struct {
	t   *tensor.Tensor
	buf []float32 // piece-sized backing array
}

// NewStreamer returns the streaming form of a compiled pserver part (one
// block's update, see Components), cutting the block into pieces of about
// chunkElems elements (rounded up to a multiple of 64). It returns nil and
// a reason when the part cannot stream: it needs exactly one accumulate,
// every op that reads the gradient or a value computed from it (or a
// block-shaped parameter or state) must be element-wise over the block's
// shape with its other inputs scalars, and what is sent or assigned from
// those ops must be the next value of a block variable.
func NewStreamer(p *Program, chunkElems int) (*Streamer, string) {
	g := p.Graph
	if len(p.nodes) != len(g.Ops) || len(p.assigns) != len(g.Assigns) {
		return nil, fmt.Sprintf("%s: the program was compiled for targets; stream a part compiled whole", g.File)
	}
	acc, why := theAccumulate(p)
	if acc == nil {
		return nil, why
	}
	b := &streamBuilder{p: p, g: g, acc: acc, gradName: acc.Outputs[0], shared: Scope{}}
	gt := p.Scope[b.gradName]
	if gt.DType != tensor.F32 {
		return nil, fmt.Sprintf("%s: the gradient is %v; only float32 streams", describeOp(acc), gt.DType)
	}
	b.block = gt.Shape
	numel := b.block.Numel()
	if numel == 0 {
		return nil, fmt.Sprintf("%s: the block %v is empty", describeOp(acc), b.block)
	}
	// chunked: the variables streamed piece by piece.
	b.chunked = map[string]bool{b.gradName: true}
	for _, name := range g.Order {
		if v := g.Vars[name]; v.Kind.Persistent() && b.isBlock(name) {
			b.chunked[name] = true
		}
	}
	b.s = &Streamer{prog: p, info: StreamGrad{Attrs: acc.Attrs, Var: acc.Attrs.String("var"), Count: acc.Attrs.Int("count"),
		Shape: b.block.Clone(), Elems: numel, Bytes: 4 * numel}}
	b.cg = &dsl.Graph{File: g.File, Name: g.Name + " (streamed)", Vars: map[string]*dsl.Var{}}
	if chunkElems <= 0 {
		chunkElems = DefaultStreamChunk
	}
	b.s.piece = min((chunkElems+streamAlign-1)/streamAlign*streamAlign, numel)
	b.declare(b.gradName, tensor.Shape{b.s.piece})
	for _, step := range []func() string{b.planOps, b.planAssigns, b.buildSends, b.compile} {
		if why := step(); why != "" {
			return nil, why
		}
	}
	b.s.carry = make([]float32, min(streamAlign, numel))
	return b.s, ""
}

// theAccumulate is a part's one accumulate op (nil and why when it has
// none or several).
func theAccumulate(p *Program) (*dsl.Op, string) {
	var acc *dsl.Op
	for _, n := range p.nodes {
		if n.op.Type != "accumulate" {
			continue
		}
		if acc != nil {
			return nil, fmt.Sprintf("%s: more than one accumulate (%s at %s, %s at %s); a streamer updates one block from one gradient", p.Graph.File, acc.Attrs.String("var"), acc.Pos, n.op.Attrs.String("var"), n.op.Pos)
		}
		acc = n.op
	}
	if acc == nil {
		return nil, fmt.Sprintf("%s: no accumulate op; only a pserver's block update streams", p.Graph.File)
	}
	return acc, ""
}

// streamBuilder builds a Streamer step by step (NewStreamer); each step
// returns why the part cannot stream, or "".
type streamBuilder struct {
	p        *Program
	g        *dsl.Graph
	s        *Streamer
	acc      *dsl.Op
	gradName string
	block    tensor.Shape
	chunked  map[string]bool
	shared   Scope      // the chunk program's inputs
	cg       *dsl.Graph // the streamed ops
	sends    []*dsl.Op
	// the assigns of block targets, the values they take (Compile's
	// targets) and, by value, a block target it becomes
	blockAssigns []dsl.Assign
	targets      []string
	assigned     map[string]string
}

func (b *streamBuilder) isBlock(name string) bool { return b.p.Scope[name].Shape.Equal(b.block) }

// declare makes name an input of the chunk program: a piece-sized window
// on the gradient or a block variable, or the part's own scalar.
func (b *streamBuilder) declare(name string, shape tensor.Shape) {
	if _, ok := b.shared[name]; ok {
		return
	}
	b.cg.AddVar(&dsl.Var{Name: name, Kind: dsl.KindData, DType: tensor.F32, Shape: shape})
	if name == b.gradName || b.g.Vars[name] != nil && b.chunked[name] {
		t := &tensor.Tensor{DType: tensor.F32, Shape: tensor.Shape{b.s.piece}}
		b.shared[name] = t
		if name == b.gradName {
			b.s.grad = t
		} else {
			b.s.views = append(b.s.views, streamView{t: t, src: b.p.Scope[name]})
		}
		return
	}
	b.shared[name] = b.p.Scope[name] // a scalar: Begin's output or persistent
}

// planOps sorts the part's ops: sends, ops run once per step before the
// pieces (Begin), and the element-wise ops streamed piece by piece.
func (b *streamBuilder) planOps() string {
	for i, n := range b.p.nodes {
		op := n.op
		switch {
		case op == b.acc:
			continue
		case op.Type == "send":
			b.sends = append(b.sends, op)
			continue
		}
		reads := false
		for _, in := range op.Inputs {
			reads = reads || b.chunked[in]
		}
		writes := false
		for _, o := range op.Outputs {
			writes = writes || b.isBlock(o)
		}
		if !reads && !writes {
			// Independent of the gradient and scalar-sized (adam's
			// bias corrections): once per step, with the part's kernel.
			b.s.begin = append(b.s.begin, i)
			continue
		}
		if why := b.streamOp(op, reads); why != "" {
			return why
		}
	}
	return ""
}

// streamOp adds op, which reads or writes the block, to the streamed ops.
func (b *streamBuilder) streamOp(op *dsl.Op, reads bool) string {
	if !reads {
		return fmt.Sprintf("%s computes a block-shaped value from neither the gradient nor a block variable", describeOp(op))
	}
	if def, _ := ops.Lookup(op.Type); !def.ElementWise {
		return fmt.Sprintf("%s is not element-wise but reads the gradient, a value computed from it or a block variable; it needs the whole block %v", describeOp(op), b.block)
	}
	for _, o := range op.Outputs {
		if t := b.p.Scope[o]; !b.isBlock(o) || t.DType != tensor.F32 {
			return fmt.Sprintf("%s outputs %s of type %s%v; a streamed op outputs the block's float32%v", describeOp(op), o, t.DType, t.Shape, b.block)
		}
		b.chunked[o] = true
	}
	for _, in := range op.Inputs {
		t := b.p.Scope[in]
		switch {
		case b.chunked[in] && b.g.Vars[in] != nil || in == b.gradName:
			b.declare(in, tensor.Shape{b.s.piece})
		case b.chunked[in]: // computed by an earlier streamed op
		case t.Numel() == 1 && t.DType == tensor.F32:
			b.declare(in, t.Shape)
		default:
			return fmt.Sprintf("%s broadcasts %s of shape %v over the block %v; only scalars stream", describeOp(op), in, t.Shape, b.block)
		}
	}
	b.cg.Ops = append(b.cg.Ops, op)
	return ""
}

// planAssigns: block targets take each piece's new values in place, the
// others swap at End like Program.Run's.
func (b *streamBuilder) planAssigns() string {
	b.targets, b.assigned = []string{}, map[string]string{}
	for _, a := range b.g.Assigns {
		if !b.chunked[a.Target] {
			b.s.scalarAssigns = append(b.s.scalarAssigns, [2]*tensor.Tensor{b.p.Scope[a.Target], b.p.Scope[a.Value]})
			continue
		}
		switch {
		case a.Value == b.gradName:
		case b.g.Vars[a.Value] != nil || !b.chunked[a.Value]:
			// Program.Run swaps the two persistents' buffers; a copy in
			// place would not.
			return fmt.Sprintf("%s: assign %s = %s: the value of a streamed block must be computed from the gradient this step", a.Pos, a.Target, a.Value)
		default:
			b.targets = append(b.targets, a.Value)
		}
		b.blockAssigns = append(b.blockAssigns, a)
		b.assigned[a.Value] = a.Target
	}
	if len(b.blockAssigns) == 0 {
		return fmt.Sprintf("%s: nothing assigns the block %v a new value", describeOp(b.acc), b.block)
	}
	return ""
}

// buildSends builds the kernels of the part's sends, which run at End:
// a block value is sent from the block variable that holds it by then.
func (b *streamBuilder) buildSends() string {
	for _, op := range b.sends {
		x := op.Inputs[0]
		payload := b.p.Scope[x]
		switch {
		case b.assigned[x] != "":
			// After the last chunk the block variable holds x's values.
			payload = b.p.Scope[b.assigned[x]]
		case b.chunked[x] && (b.g.Vars[x] == nil || isAssigned(b.g, x)):
			return fmt.Sprintf("%s sends %s, which streaming never holds whole; only the next value of an assigned block (or a scalar) can be sent", describeOp(op), x)
		}
		k, err := kernels.Build(op.Type, kernels.Args{In: []*tensor.Tensor{payload}, Attrs: op.Attrs, Node: b.p.Node})
		if err != nil {
			return fmt.Sprintf("%s: %v", describeOp(op), err)
		}
		b.s.sends = append(b.s.sends, streamSend{op: op, kernel: k})
	}
	return ""
}

// compile compiles the streamed ops, the part's own, at piece shape:
// block variables are windows moved along the block, scalars are the
// part's tensors, and the values assigned are targets, so no in-place
// reuse overwrites them before they are copied out.
func (b *streamBuilder) compile() string {
	chunk, err := Compile(b.cg, CompileOptions{Targets: b.targets, Shared: b.shared, Sequential: true})
	if err != nil {
		return fmt.Sprintf("compiling the streamed ops at %d elements: %v", b.s.piece, err)
	}
	s := b.s
	s.chunk = chunk
	own := map[*tensor.Tensor]bool{}
	for name, t := range chunk.Scope {
		if _, ok := b.shared[name]; !ok && !own[t] {
			own[t] = true
			s.temps = append(s.temps, streamTemp{t: t, buf: t.F})
		}
	}
	s.cur = s.piece
	for _, a := range b.blockAssigns {
		val := b.shared[a.Value]
		if val == nil {
			val = chunk.Scope[a.Value]
		}
		s.blockAssigns = append(s.blockAssigns, blockAssign{dst: b.p.Scope[a.Target], val: val})
	}
	return ""
}

func describeOp(op *dsl.Op) string {
	return fmt.Sprintf("op %s (%v -> %v) at %s", op.Type, op.Inputs, op.Outputs, op.Pos)
}

func isAssigned(g *dsl.Graph, target string) bool {
	for _, a := range g.Assigns {
		if a.Target == target {
			return true
		}
	}
	return false
}

// Grad describes the gradient the streamer consumes.
func (s *Streamer) Grad() StreamGrad { return s.info }

// Begin starts a step: it runs the part's ops that do not depend on the
// gradient (scalars such as adam's beta powers and bias corrections). The
// caller must have flushed the previous step's sends before the first
// Chunk, since the chunks overwrite in place the block sent last step
// (Program.Run writes the other buffer and swaps). A step begun and not
// ended is abandoned; the ranges it applied stay applied.
func (s *Streamer) Begin(rt kernels.Runtime) error {
	s.rt, s.begun, s.next, s.carryN = rt, true, 0, 0
	for _, i := range s.begin {
		n := &s.prog.nodes[i]
		if err := n.kernel(rt); err != nil {
			return opError(n.op, err)
		}
	}
	return nil
}

// Chunk applies the update to elements [off, off+len(grad)) of the block,
// given the averaged gradient of that range. Calls must cover the block
// in order, once per step, in any sizes; grad is not kept after Chunk
// returns (a tail shorter than 64 elements is copied). An error means the
// calls broke that contract; the ranges already applied stay applied.
func (s *Streamer) Chunk(off int, grad []float32) error {
	switch {
	case !s.begun:
		return fmt.Errorf("stream %s: Chunk before Begin", s.info.Var)
	case off != s.next:
		return fmt.Errorf("stream %s: chunk at element %d, want %d: chunks cover the block in order, once per step", s.info.Var, off, s.next)
	case len(grad) > s.info.Elems-off:
		return fmt.Errorf("stream %s: chunk [%d, %d) ends past the block's %d elements", s.info.Var, off, off+len(grad), s.info.Elems)
	}
	s.next += len(grad)
	if s.carryN > 0 {
		// Complete the aligned group the previous call left unfinished.
		start := off - s.carryN
		want := min(streamAlign, s.info.Elems-start)
		k := copy(s.carry[s.carryN:want], grad)
		s.carryN += k
		grad, off = grad[k:], off+k
		if s.carryN < want {
			return nil
		}
		s.carryN = 0
		if err := s.apply(start, s.carry[:want]); err != nil {
			return err
		}
	}
	// off is aligned here (or grad is empty): apply whole groups, or up
	// to the block's end, and keep the rest for the next call.
	body := len(grad)
	if off+body < s.info.Elems {
		body -= body % streamAlign
	}
	for p := 0; p < body; p += s.piece {
		n := min(s.piece, body-p)
		if err := s.apply(off+p, grad[p:p+n]); err != nil {
			return err
		}
	}
	s.carryN = copy(s.carry, grad[body:])
	return nil
}

// apply runs the streamed ops on one aligned piece and writes the new
// values of the block variables. All ops of the piece run before any
// value is written, so an op reading a state's old value after its new
// value was computed sees the old one, as in Program.Run.
func (s *Streamer) apply(off int, grad []float32) error {
	n := len(grad)
	s.grad.F = grad
	for _, v := range s.views {
		v.t.F = v.src.F[off : off+n]
	}
	if n != s.cur {
		for _, t := range s.temps {
			t.t.F = t.buf[:n]
		}
		s.cur = n
	}
	if err := s.chunk.Run(s.rt); err != nil {
		return err
	}
	for _, a := range s.blockAssigns {
		copy(a.dst.F[off:off+n], a.val.F[:n])
	}
	s.grad.F = nil // the caller's buffer is theirs again
	return nil
}

// End finishes the step once the chunks covered the block: the part's
// sends, with the block variable (now holding its next value) as the
// payload of what sent that value, then the scalar assigns.
func (s *Streamer) End(rt kernels.Runtime) error {
	if !s.begun || s.next != s.info.Elems || s.carryN != 0 {
		return fmt.Errorf("stream %s: End after %d of the block's %d elements; Begin, then chunks covering the block", s.info.Var, s.next, s.info.Elems)
	}
	s.begun = false
	for _, snd := range s.sends {
		if err := snd.kernel(rt); err != nil {
			return opError(snd.op, err)
		}
	}
	for _, a := range s.scalarAssigns {
		tensor.SwapData(a[0], a[1])
	}
	return nil
}
