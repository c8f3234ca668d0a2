package dsl

import (
	"math"
	"strconv"
	"strings"

	"github.com/psgraph/psgraph/dsl/ops"
)

// Learning-rate schedules, coupled weight decay and $step: what optimizer
// expansion adds to a parameter's update around the template's own ops.

// usesStep reports whether the template reads $step.
func (t *Template) usesStep() bool {
	for _, f := range t.forms() {
		for _, op := range f.Update {
			for _, in := range op.Inputs {
				if in == "$step" {
					return true
				}
			}
		}
	}
	return false
}

// readsHyper reports whether an attribute expression of the template
// names hyper-parameter h ($h).
func (t *Template) readsHyper(h string) bool {
	for _, f := range t.forms() {
		for _, op := range f.Update {
			for _, v := range op.raw {
				if refersTo(v.Value, h) {
					return true
				}
			}
		}
	}
	return false
}

// refersTo reports whether expression src names $h.
func refersTo(src, h string) bool {
	for i := 0; ; {
		j := strings.Index(src[i:], "$"+h)
		if j < 0 {
			return false
		}
		end := i + j + 1 + len(h)
		if end == len(src) || !isNameByte(src[end]) {
			return true
		}
		i = end
	}
}

func isNameByte(c byte) bool {
	return c == '_' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

// lrFactor reports how a template op scales by the learning rate alone:
// "mul" for `scale` by exactly $lr, "div" for `scale` by exactly 1 / $lr
// (FTRL's quadratic term), both without a bias; "" otherwise. A schedule
// turns such an op into a multiplication or a division by the step's rate.
func lrFactor(op *Op) string {
	if op.Type != "scale" {
		return ""
	}
	if b, ok := op.raw["bias"]; ok && b.Value != "0" {
		return ""
	}
	f, ok := op.raw["factor"]
	if !ok {
		return ""
	}
	switch strings.Join(strings.Fields(f.Value), "") {
	case "$lr":
		return "mul"
	case "1/$lr":
		return "div"
	}
	return ""
}

// scheduleOps returns the ops computing parameter p's learning rate at
// step s (the step op's output, counting from 1) into out, for schedule
// sc scaling rate lr. With t = s - 1 - warmup steps after the warmup
// (never below 0):
//
//	warmup W:     lr(s) *= min(1, s/W)
//	cosine:       min_lr + (lr - min_lr) (1 + cos(pi min(t, T-W) / (T-W))) / 2
//	exponential:  lr gamma^t
//	step:         lr gamma^floor(t / every)
func scheduleOps(sc *Schedule, lr float64, steps int, p, s, out string, mark func(*Op) *Op) ([]*Op, error) {
	var list []*Op
	n := 0
	emit := func(typ string, in []string, attrs ops.Attrs) string {
		n++
		name := p + "@$lr." + typ + "." + strconv.Itoa(n)
		list = append(list, mark(NewOp(typ, in, []string{name}, attrs, Optimize, sc.Pos)))
		return name
	}
	W := float64(sc.Warmup)
	after := func() string { // t: steps since the warmup ended, from 0
		return emit("clip", []string{emit("scale", []string{s}, ops.Attrs{"bias": -1 - W})}, ops.Attrs{"min": 0.0})
	}
	main := ""
	switch sc.Kind {
	case "constant":
	case "cosine":
		T := sc.Steps
		if T == 0 {
			T = steps
		}
		if T == 0 {
			return nil, Errorf(sc.Pos, "the cosine schedule needs its length: add steps: <N> to lr, or train.steps")
		}
		span := float64(T - sc.Warmup)
		if span <= 0 {
			return nil, Errorf(sc.Pos, "the cosine schedule anneals over steps - warmup = %d - %d steps; give it more steps than warmup", T, sc.Warmup)
		}
		t := emit("clip", []string{after()}, ops.Attrs{"min": 0.0, "max": span})
		c := emit("cos", []string{emit("scale", []string{t}, ops.Attrs{"factor": math.Pi / span})}, nil)
		main = emit("scale", []string{c}, ops.Attrs{"factor": (lr - sc.MinLR) / 2, "bias": (lr + sc.MinLR) / 2})
	case "exponential":
		main = emit("exp", []string{emit("scale", []string{after()}, ops.Attrs{"factor": math.Log(sc.Gamma), "bias": math.Log(lr)})}, nil)
	case "step":
		// floor((t + 1/2) / every): the half keeps float32 rounding of
		// t/every at a multiple of every from falling below the integer.
		k := emit("floor", []string{emit("scale", []string{after()}, ops.Attrs{"factor": 1 / float64(sc.Every), "bias": 0.5 / float64(sc.Every)})}, nil)
		main = emit("exp", []string{emit("scale", []string{k}, ops.Attrs{"factor": math.Log(sc.Gamma), "bias": math.Log(lr)})}, nil)
	}
	if sc.Warmup > 0 {
		f := lr
		if main != "" {
			f = 1
		}
		w := emit("clip", []string{emit("scale", []string{s}, ops.Attrs{"factor": f / W})}, ops.Attrs{"max": f})
		if main == "" {
			main = w
		} else {
			main = emit("mul", []string{w, main}, nil)
		}
	}
	// main is the last op's output: it becomes out
	list[len(list)-1].Outputs[0] = out
	return list, nil
}

// ClipFactor is the variable holding train.clip.norm's factor, min(1,
// norm / (||g|| + 1e-6)), which every parameter's gradient is multiplied by.
const ClipFactor = "clip@factor"

// ClipNormOps returns the ops computing ClipFactor from the partial sums
// of squares named parts: their sum is ||g||². Optimizer expansion adds
// them with one part per parameter; split puts them on the trainers with
// one part per pserver.
func ClipNormOps(norm float64, parts []string, pos Pos) []*Op {
	var list []*Op
	total := parts[0]
	for i, x := range parts[1:] {
		next := "clip@sumsq." + strconv.Itoa(i+1)
		list = append(list, NewOp("add", []string{total, x}, []string{next}, nil, Backward, pos))
		total = next
	}
	// factor = min(1, norm / (sqrt(total) + 1e-6)), as clip_grad_norm_
	return append(list,
		NewOp("sqrt", []string{total}, []string{"clip@norm"}, nil, Backward, pos),
		NewOp("scale", []string{"clip@norm"}, []string{"clip@norm.eps"}, ops.Attrs{"bias": 1e-6}, Backward, pos),
		NewOp("fill", nil, []string{"clip@max_norm"}, ops.Attrs{"value": norm, "shape": []int{}}, Backward, pos),
		NewOp("div", []string{"clip@max_norm", "clip@norm.eps"}, []string{"clip@ratio"}, nil, Backward, pos),
		NewOp("clip", []string{"clip@ratio"}, []string{ClipFactor}, ops.Attrs{"max": 1.0}, Backward, pos))
}

// clipGradients adds train.clip's ops to x for params (those with a
// gradient) and returns, per parameter, the name of its clipped gradient.
// Clipping by value is element-wise, part of each
// parameter's update (section optimize: on a pserver it runs on the
// trainers' mean gradient, as a local run clips its batch's). Clipping by
// the global norm has a part in each parameter's update (its sum of
// squares, and the multiplication by ClipFactor) and ops that read every
// parameter's part (ClipNormOps, section backward, in no update); split
// moves those to the trainers and exchanges one partial sum per pserver.
func (g *Graph) clipGradients(params []string, sparse map[string]bool, x *expansion) (map[string]string, error) {
	c := g.Train.Clip
	if c == nil {
		return nil, nil
	}
	out := make(map[string]string, len(params))
	for _, p := range params {
		out[p] = GradName(p)
	}
	if c.Norm > 0 {
		var sq []string
		for _, p := range params {
			if sparse[p] {
				return nil, Errorf(c.Pos, "train.clip.norm is not supported yet for a lookup table's row gradient (%s); clip by value instead", p)
			}
			ss := p + "@$clip.sumsq"
			op := NewOp("sum_squares", []string{out[p]}, []string{ss}, nil, Optimize, c.Pos)
			op.Param, op.Place = p, g.Vars[p].Place
			x.ops = append(x.ops, op)
			sq = append(sq, ss)
		}
		x.ops = append(x.ops, ClipNormOps(c.Norm, sq, c.Pos)...)
		for _, p := range params {
			name := p + "@$grad.norm_clipped"
			op := NewOp("mul", []string{out[p], ClipFactor}, []string{name}, nil, Optimize, c.Pos)
			op.Param, op.Place = p, g.Vars[p].Place
			x.ops = append(x.ops, op)
			out[p] = name
		}
	}
	if c.Value > 0 {
		for _, p := range params {
			name := p + "@$grad.clipped"
			op := NewOp("clip", []string{out[p]}, []string{name}, ops.Attrs{"min": -c.Value, "max": c.Value}, Optimize, c.Pos)
			op.Param, op.Place = p, g.Vars[p].Place
			x.ops = append(x.ops, op)
			out[p] = name
		}
	}
	return out, nil
}
