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
	// Attrs are the accumulate op's own attributes (var, count, shape),
	// as Comm.Accumulate takes them.
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
	var acc *dsl.Op
	for _, n := range p.nodes {
		if n.op.Type != "accumulate" {
			continue
		}
		if acc != nil {
			return nil, fmt.Sprintf("%s: more than one accumulate (%s at %s, %s at %s); a streamer updates one block from one gradient", g.File, acc.Attrs.String("var"), acc.Pos, n.op.Attrs.String("var"), n.op.Pos)
		}
		acc = n.op
	}
	if acc == nil {
		return nil, fmt.Sprintf("%s: no accumulate op; only a pserver's block update streams", g.File)
	}
	gradName := acc.Outputs[0]
	gt := p.Scope[gradName]
	if gt.DType != tensor.F32 {
		return nil, fmt.Sprintf("%s: the gradient is %v; only float32 streams", describeOp(acc), gt.DType)
	}
	block := gt.Shape
	numel := block.Numel()
	if numel == 0 {
		return nil, fmt.Sprintf("%s: the block %v is empty", describeOp(acc), block)
	}
	isBlock := func(name string) bool { return p.Scope[name].Shape.Equal(block) }

	// chunked: the variables streamed piece by piece.
	chunked := map[string]bool{gradName: true}
	for _, name := range g.Order {
		if v := g.Vars[name]; v.Kind.Persistent() && isBlock(name) {
			chunked[name] = true
		}
	}
	s := &Streamer{prog: p, info: StreamGrad{Attrs: acc.Attrs, Var: acc.Attrs.String("var"), Count: acc.Attrs.Int("count"),
		Shape: block.Clone(), Elems: numel, Bytes: 4 * numel}}
	cg := &dsl.Graph{File: g.File, Name: g.Name + " (streamed)", Vars: map[string]*dsl.Var{}}
	if chunkElems <= 0 {
		chunkElems = DefaultStreamChunk
	}
	s.piece = min((chunkElems+streamAlign-1)/streamAlign*streamAlign, numel)
	shared := Scope{}
	declare := func(name string, shape tensor.Shape) {
		if _, ok := shared[name]; ok {
			return
		}
		cg.AddVar(&dsl.Var{Name: name, Kind: dsl.KindData, DType: tensor.F32, Shape: shape})
		if name == gradName || g.Vars[name] != nil && chunked[name] {
			t := &tensor.Tensor{DType: tensor.F32, Shape: tensor.Shape{s.piece}}
			shared[name] = t
			if name == gradName {
				s.grad = t
			} else {
				s.views = append(s.views, streamView{t: t, src: p.Scope[name]})
			}
			return
		}
		shared[name] = p.Scope[name] // a scalar: Begin's output or persistent
	}
	declare(gradName, tensor.Shape{s.piece})
	var sends []*dsl.Op
	for i, n := range p.nodes {
		op := n.op
		switch {
		case op == acc:
			continue
		case op.Type == "send":
			sends = append(sends, op)
			continue
		}
		reads := false
		for _, in := range op.Inputs {
			reads = reads || chunked[in]
		}
		writes := false
		for _, o := range op.Outputs {
			writes = writes || isBlock(o)
		}
		if !reads && !writes {
			// Independent of the gradient and scalar-sized (adam's
			// bias corrections): once per step, with the part's kernel.
			s.begin = append(s.begin, i)
			continue
		}
		if !reads {
			return nil, fmt.Sprintf("%s computes a block-shaped value from neither the gradient nor a block variable", describeOp(op))
		}
		if def, _ := ops.Lookup(op.Type); !def.ElementWise {
			return nil, fmt.Sprintf("%s is not element-wise but reads the gradient, a value computed from it or a block variable; it needs the whole block %v", describeOp(op), block)
		}
		for _, o := range op.Outputs {
			if t := p.Scope[o]; !isBlock(o) || t.DType != tensor.F32 {
				return nil, fmt.Sprintf("%s outputs %s of type %s%v; a streamed op outputs the block's float32%v", describeOp(op), o, t.DType, t.Shape, block)
			}
			chunked[o] = true
		}
		for _, in := range op.Inputs {
			t := p.Scope[in]
			switch {
			case chunked[in] && g.Vars[in] != nil || in == gradName:
				declare(in, tensor.Shape{s.piece})
			case chunked[in]: // computed by an earlier streamed op
			case t.Numel() == 1 && t.DType == tensor.F32:
				declare(in, t.Shape)
			default:
				return nil, fmt.Sprintf("%s broadcasts %s of shape %v over the block %v; only scalars stream", describeOp(op), in, t.Shape, block)
			}
		}
		cg.Ops = append(cg.Ops, op)
	}

	// Assigns: block targets take each piece's new values in place, the
	// others swap at End like Program.Run's.
	targets := []string{}
	var blockAssigns []dsl.Assign
	assigned := map[string]string{} // value -> a block target it becomes
	for _, a := range g.Assigns {
		if !chunked[a.Target] {
			s.scalarAssigns = append(s.scalarAssigns, [2]*tensor.Tensor{p.Scope[a.Target], p.Scope[a.Value]})
			continue
		}
		switch {
		case a.Value == gradName:
		case g.Vars[a.Value] != nil || !chunked[a.Value]:
			// Program.Run swaps the two persistents' buffers; a copy in
			// place would not.
			return nil, fmt.Sprintf("%s: assign %s = %s: the value of a streamed block must be computed from the gradient this step", a.Pos, a.Target, a.Value)
		default:
			targets = append(targets, a.Value)
		}
		blockAssigns = append(blockAssigns, a)
		assigned[a.Value] = a.Target
	}
	if len(blockAssigns) == 0 {
		return nil, fmt.Sprintf("%s: nothing assigns the block %v a new value", describeOp(acc), block)
	}
	for _, op := range sends {
		x := op.Inputs[0]
		payload := p.Scope[x]
		switch {
		case assigned[x] != "":
			// After the last chunk the block variable holds x's values.
			payload = p.Scope[assigned[x]]
		case chunked[x] && (g.Vars[x] == nil || isAssigned(g, x)):
			return nil, fmt.Sprintf("%s sends %s, which streaming never holds whole; only the next value of an assigned block (or a scalar) can be sent", describeOp(op), x)
		}
		k, err := kernels.Build(op.Type, kernels.Args{In: []*tensor.Tensor{payload}, Attrs: op.Attrs})
		if err != nil {
			return nil, fmt.Sprintf("%s: %v", describeOp(op), err)
		}
		s.sends = append(s.sends, streamSend{op: op, kernel: k})
	}

	// The streamed ops are the part's own, compiled by Compile at piece
	// shape: block variables are windows moved along the block, scalars
	// are the part's tensors, and the values assigned are targets, so no
	// in-place reuse overwrites them before they are copied out.
	chunk, err := Compile(cg, CompileOptions{Targets: targets, Shared: shared, Sequential: true})
	if err != nil {
		return nil, fmt.Sprintf("compiling the streamed ops at %d elements: %v", s.piece, err)
	}
	s.chunk = chunk
	own := map[*tensor.Tensor]bool{}
	for name, t := range chunk.Scope {
		if _, ok := shared[name]; !ok && !own[t] {
			own[t] = true
			s.temps = append(s.temps, streamTemp{t: t, buf: t.F})
		}
	}
	s.cur = s.piece
	for _, a := range blockAssigns {
		val := shared[a.Value]
		if val == nil {
			val = chunk.Scope[a.Value]
		}
		s.blockAssigns = append(s.blockAssigns, blockAssign{dst: p.Scope[a.Target], val: val})
	}
	s.carry = make([]float32, min(streamAlign, numel))
	return s, ""
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
