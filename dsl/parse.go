package dsl

import (
	"io"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
)

// SchemaVersion is the DSL version this psgraph reads and writes.
const SchemaVersion = 1

var topKeys = []string{"psgraph", "name", "data", "params", "state", "ops", "assign", "train"}

// Parse reads a model's YAML into a Graph without expanding or checking it.
// Relative data paths are resolved against the directory of file.
func Parse(file string, src []byte) (*Graph, error) {
	doc, err := parseYAML(src)
	if err != nil {
		if err == io.EOF {
			return nil, Errorf(Pos{File: file, Line: 1, Col: 1}, "the file is empty; a model starts with `psgraph: %d`", SchemaVersion)
		}
		return nil, yamlError(file, err)
	}
	d := &decoder{file: file}
	g := &Graph{File: file, Vars: map[string]*Var{}}
	if len(doc.Content) == 0 {
		return nil, Errorf(Pos{File: file, Line: 1, Col: 1}, "the file is empty; a model starts with `psgraph: %d`", SchemaVersion)
	}
	root := doc.Content[0]
	var version *yaml.Node
	var opsNode, assignNode *yaml.Node
	d.fields(root, "the model", topKeys, func(key string, k, v *yaml.Node) {
		switch key {
		case "psgraph":
			version = v
			if n, ok := d.integer(v, "psgraph (the schema version)"); ok && n != SchemaVersion {
				d.errorf(v, "schema version %d is not supported; this psgraph reads version %d", n, SchemaVersion)
			}
		case "name":
			g.Name, _ = d.str(v, "name")
		case "data":
			g.Data = d.data(v, filepath.Dir(file), g)
		case "params":
			d.vars(v, "params", KindParam, g)
		case "state":
			d.vars(v, "state", KindState, g)
		case "ops":
			opsNode = v
		case "assign":
			assignNode = v
		case "train":
			g.Train = d.train(v)
		}
	})
	d.checkEvalEvery(g)
	d.checkOnlineTrain(g)
	if root.Kind == yaml.MappingNode && version == nil {
		d.errorf(root, "missing `psgraph: %d` (the schema version) at the top of the model", SchemaVersion)
	}
	if opsNode != nil {
		g.Ops = d.ops(opsNode, "ops", false)
	}
	if assignNode != nil {
		g.Assigns = d.assigns(assignNode)
	}
	if g.Name == "" {
		g.Name = strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	}
	return g, d.errs.Err()
}

func yamlError(file string, err error) error {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "yaml: ")
	// yaml.v3 reports "line N: message".
	if strings.HasPrefix(msg, "line ") {
		rest := msg[5:]
		if i := strings.Index(rest, ":"); i > 0 {
			if n, e := strconv.Atoi(rest[:i]); e == nil {
				return Errorf(Pos{File: file, Line: n, Col: 1}, "invalid YAML: %s", strings.TrimSpace(rest[i+1:]))
			}
		}
	}
	return Errorf(Pos{File: file, Line: 1, Col: 1}, "invalid YAML: %s", msg)
}

var (
	varKeys   = []string{"shape", "init", "dtype", "place", "of", "block"}
	paramKeys = append(append([]string{}, varKeys...), "optimizer", "dynamic")
)

func (d *decoder) vars(n *yaml.Node, section string, kind VarKind, g *Graph) {
	keys := varKeys
	if kind == KindParam || kind == KindState {
		keys = paramKeys
	}
	d.fields(n, section, nil, func(name string, k, v *yaml.Node) {
		vr := &Var{Name: name, Kind: kind, DType: ir.F32, Pos: d.pos(k)}
		what := section + "." + name
		hasShape := false
		d.fields(v, what, keys, func(key string, kk, vv *yaml.Node) {
			switch key {
			case "optimizer":
				if kind != KindParam {
					d.errorf(kk, "%s: a state variable is not trained, so it takes no optimizer; declare %s under params to train it", what, name)
					return
				}
				vr.Optimizer = d.optimizer(vv)
			case "dynamic":
				if kind != KindParam {
					d.errorf(kk, "%s: only a parameter can be a dynamic table; declare %s under params", what, name)
					return
				}
				hasShape = true
				vr.Dynamic = d.dynamic(vv, what+".dynamic")
			case "shape":
				hasShape = true
				if s, ok := d.ints(vv, what+".shape"); ok {
					for _, x := range s {
						if x <= 0 {
							d.errorf(vv, "%s.shape %v must have positive dimensions (only data variables have the -1 batch dimension)", what, intList(s))
							break
						}
					}
					vr.Shape = s
				}
			case "init":
				vr.Init = d.init(vv, what+".init")
			case "dtype":
				if s, ok := d.str(vv, what+".dtype"); ok {
					dt, ok := ir.ParseDType(s)
					if !ok {
						d.errorf(vv, "%s.dtype %q is not float32, int32 or int64", what, s)
					}
					vr.DType = dt
				}
			case "place":
				vr.Place = d.place(vv, what)
			case "of":
				vr.Of, _ = d.str(vv, what+".of")
			case "block":
				vr.Block = d.block(vv, what+".block")
			}
		})
		if b := vr.Block; b != nil && vr.Shape != nil {
			want := append(ir.Shape{b.Rows()}, b.Shape[1:]...)
			if !vr.Shape.Equal(want) {
				d.errorf(v, "%s.shape %v does not match its block: rows [%d, %d) (stride %d) of %s %v have shape %v", what, vr.Shape, b.Start, b.End, b.Step(), b.Of, b.Shape, want)
			}
		}
		if !hasShape && v.Kind == yaml.MappingNode {
			d.errorf(v, "%s needs a shape, e.g. shape: [64, 128]", what)
		}
		if kind == KindParam && vr.DType != ir.F32 {
			d.errorf(v, "%s: parameters are float32", what)
		}
		if vr.Init == nil {
			vr.Init = &Init{Type: "zeros", Pos: vr.Pos}
		}
		if vr.Dynamic != nil {
			d.checkDynamicVar(vr, v, what)
		}
		d.declare(g, vr)
	})
}

// block parses `block: {of: W, rows: [start, end], shape: [full shape]}`.
func (d *decoder) block(n *yaml.Node, what string) *Block {
	b := &Block{Pos: d.pos(n)}
	var rowsNode, shapeNode *yaml.Node
	if !d.fields(n, what, []string{"of", "rows", "stride", "shape"}, func(key string, k, v *yaml.Node) {
		switch key {
		case "stride":
			if st, ok := d.integer(v, what+".stride"); ok {
				if st < 1 {
					d.errorf(v, "%s.stride must be at least 1 (every stride-th row of rows), got %d", what, st)
				}
				b.Stride = st
			}
		case "of":
			b.Of, _ = d.str(v, what+".of")
		case "rows":
			rowsNode = v
			if r, ok := d.ints(v, what+".rows"); ok {
				if len(r) != 2 || r[0] < 0 || r[1] <= r[0] {
					d.errorf(v, "%s.rows must be a half-open range [start, end) with 0 <= start < end, got %v", what, r)
				} else {
					b.Start, b.End = r[0], r[1]
				}
			}
		case "shape":
			shapeNode = v
			if s, ok := d.ints(v, what+".shape"); ok {
				b.Shape = s
			}
		}
	}) {
		return nil
	}
	switch {
	case b.Of == "":
		d.errorf(n, "%s needs of: the whole variable the block is cut from", what)
	case rowsNode == nil:
		d.errorf(n, "%s needs rows: [start, end)", what)
	case shapeNode == nil:
		d.errorf(n, "%s needs shape: the whole variable's shape", what)
	case len(b.Shape) == 0 || b.End > b.Shape[0]:
		d.errorf(shapeNode, "%s: rows [%d, %d) do not fit in dim 0 of shape %v", what, b.Start, b.End, b.Shape)
	default:
		return b
	}
	return nil
}

func (d *decoder) declare(g *Graph, v *Var) {
	if old, dup := g.Vars[v.Name]; dup {
		d.errs = append(d.errs, Errorf(v.Pos, "%q is declared twice (first as %s at %s); data, params and state share one namespace, so rename one", v.Name, old.Kind, old.Pos))
		return
	}
	g.AddVar(v)
}

func (d *decoder) place(n *yaml.Node, what string) string {
	s, ok := d.str(n, what+".place")
	if !ok {
		return ""
	}
	if err := CheckPlace(s); err != "" {
		d.errorf(n, "%s.place: %s", what, err)
	}
	return s
}

// CheckPlace validates a placement string; it returns "" when valid.
func CheckPlace(s string) string {
	if s == "trainer" || s == "pserver" {
		return ""
	}
	if rest, ok := strings.CutPrefix(s, "pserver:"); ok {
		if i, err := strconv.Atoi(rest); err == nil && i >= 0 {
			return ""
		}
	}
	return strconv.Quote(s) + " is not trainer, pserver or pserver:<index>"
}

// Initializers and their attributes.
var initAttrs = map[string][]ops.AttrSpec{
	"zeros":          {},
	"constant":       {{Name: "value", Kind: ops.AttrFloat, Required: true}},
	"uniform":        {{Name: "min", Kind: ops.AttrFloat, Default: -0.05}, {Name: "max", Kind: ops.AttrFloat, Default: 0.05}, seedAttr},
	"normal":         {{Name: "mean", Kind: ops.AttrFloat, Default: 0.0}, {Name: "std", Kind: ops.AttrFloat, Default: 0.01}, seedAttr},
	"he_normal":      {seedAttr},
	"xavier_uniform": {seedAttr},
}

var seedAttr = ops.AttrSpec{Name: "seed", Kind: ops.AttrInt}

// InitNames lists the initializers.
func InitNames() []string {
	out := make([]string, 0, len(initAttrs))
	for k := range initAttrs {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (d *decoder) init(n *yaml.Node, what string) *Init {
	return d.initWith(n, what, nil)
}

// initWith parses an initializer whose attributes may be expressions over
// hyper (an optimizer state's init: {type: constant, value: $name}).
func (d *decoder) initWith(n *yaml.Node, what string, hyper map[string]float64) *Init {
	in := &Init{Pos: d.pos(n), Attrs: ops.Attrs{}}
	if n.Kind == yaml.ScalarNode { // shorthand: init: zeros
		in.Type = n.Value
		if _, ok := initAttrs[in.Type]; !ok {
			d.errorf(n, "unknown initializer %q%s; known: %s", in.Type, suggest(in.Type, InitNames()), strings.Join(InitNames(), ", "))
		}
		d.fillDefaults(n, in.Attrs, initAttrs[in.Type], what)
		return in
	}
	raw := map[string]*yaml.Node{}
	var typeNode *yaml.Node
	d.fields(n, what, nil, func(key string, k, v *yaml.Node) {
		if key == "type" {
			typeNode = v
			in.Type, _ = d.str(v, what+".type")
			return
		}
		raw[key] = v
	})
	if typeNode == nil {
		d.errorf(n, "%s needs a type (%s)", what, strings.Join(InitNames(), ", "))
		return in
	}
	specs, ok := initAttrs[in.Type]
	if !ok {
		d.errorf(typeNode, "unknown initializer %q%s; known: %s", in.Type, suggest(in.Type, InitNames()), strings.Join(InitNames(), ", "))
		return in
	}
	in.Attrs = d.attrs(n, raw, specs, what, hyper)
	if in.Type == "uniform" && in.Attrs.Float("min") > in.Attrs.Float("max") {
		d.errorf(n, "%s: min %g is greater than max %g", what, in.Attrs.Float("min"), in.Attrs.Float("max"))
	}
	if in.Type == "normal" && in.Attrs.Float("std") < 0 {
		d.errorf(n, "%s: std must be >= 0", what)
	}
	return in
}

func (d *decoder) fillDefaults(n *yaml.Node, a ops.Attrs, specs []ops.AttrSpec, what string) {
	for _, s := range specs {
		if _, ok := a[s.Name]; ok {
			continue
		}
		if s.Required {
			d.errorf(n, "%s needs attribute %q (%s)", what, s.Name, s.Kind)
		} else if s.Default != nil {
			a[s.Name] = s.Default
		}
	}
}

// attrs converts raw attribute nodes against their specs. Values may be
// expressions over hyper-parameters ("$lr", "1 - $beta1") when hyper is set.
func (d *decoder) attrs(at *yaml.Node, raw map[string]*yaml.Node, specs []ops.AttrSpec, what string, hyper map[string]float64) ops.Attrs {
	a := ops.Attrs{}
	// In file order, so that several errors come in the same order every
	// time (TestAttrErrorsInFileOrder).
	var buf [8]string
	keys := buf[:0]
	for key := range raw {
		keys = append(keys, key)
	}
	if len(keys) > 1 {
		slices.SortFunc(keys, func(x, y string) int {
			a, b := raw[x], raw[y]
			if a.Line != b.Line {
				return a.Line - b.Line
			}
			return a.Column - b.Column
		})
	}
	for _, key := range keys {
		v := raw[key]
		var spec *ops.AttrSpec
		for i := range specs {
			if specs[i].Name == key {
				spec = &specs[i]
			}
		}
		if spec == nil {
			names := make([]string, len(specs))
			for i, s := range specs {
				names[i] = s.Name
			}
			if len(names) == 0 {
				d.errorf(v, "%s takes no attributes, got %q", what, key)
			} else {
				d.errorf(v, "unknown attribute %q for %s%s; allowed: %s", key, what, suggestAttr(key, names), strings.Join(names, ", "))
			}
			continue
		}
		aw := what + " attribute " + key
		if hyper != nil && v.Kind == yaml.ScalarNode && strings.Contains(v.Value, "$") {
			f, err := evalExpr(v.Value, hyper)
			if err != nil {
				d.errorf(v, "%s: %v", aw, err)
				continue
			}
			switch spec.Kind {
			case ops.AttrFloat:
				a[key] = f
			case ops.AttrInt:
				a[key] = int(f)
			default:
				d.errorf(v, "%s is a %s; hyper-parameters are numbers", aw, spec.Kind)
			}
			continue
		}
		switch spec.Kind {
		case ops.AttrFloat:
			if f, ok := d.number(v, aw); ok {
				a[key] = f
			}
		case ops.AttrInt:
			if x, ok := d.integer(v, aw); ok {
				a[key] = x
			}
		case ops.AttrBool:
			if b, ok := d.boolean(v, aw); ok {
				a[key] = b
			}
		case ops.AttrString:
			if s, ok := d.str(v, aw); ok {
				a[key] = s
			}
		case ops.AttrInts:
			if xs, ok := d.ints(v, aw); ok {
				a[key] = xs
			}
		}
	}
	d.fillDefaults(at, a, specs, what)
	return a
}

var opKeys = []string{"type", "inputs", "outputs", "attrs", "section", "place", "param"}

// ops parses an op list. In a template, attribute values may reference
// hyper-parameters; they are kept raw and converted at expansion.
func (d *decoder) ops(n *yaml.Node, what string, template bool) []*Op {
	items, ok := d.list(n, what)
	if !ok {
		return nil
	}
	// The entries are decoded in parts on every core, each part with a
	// decoder of its own; the ops and errors are joined in file order.
	parts := min(runtime.GOMAXPROCS(0), len(items)/minOpsPart)
	if parts <= 1 {
		return d.opItems(items, 0, what, template)
	}
	outs := make([][]*Op, parts)
	decs := make([]decoder, parts)
	var wg sync.WaitGroup
	for p := range parts {
		lo, hi := p*len(items)/parts, (p+1)*len(items)/parts
		decs[p].file = d.file
		wg.Add(1)
		go func() {
			defer wg.Done()
			outs[p] = decs[p].opItems(items[lo:hi], lo, what, template)
		}()
	}
	wg.Wait()
	for p := range parts {
		d.errs = append(d.errs, decs[p].errs...)
	}
	return slices.Concat(outs...)
}

// minOpsPart is the fewest op entries decoded on a core of their own.
const minOpsPart = 2048

// opItems decodes the op entries items, the first being entry first of
// what.
func (d *decoder) opItems(items []*yaml.Node, first int, what string, template bool) []*Op {
	out := make([]*Op, 0, len(items))
	for i, it := range items {
		op := &Op{Pos: d.pos(it)}
		ow := what + "[" + strconv.Itoa(first+i) + "]"
		raw := map[string]*yaml.Node{}
		var attrNode, typeNode *yaml.Node
		if !d.fields(it, "op "+ow, opKeys, func(key string, k, v *yaml.Node) {
			switch key {
			case "type":
				typeNode = v
				op.Type, _ = d.str(v, ow+".type")
			case "inputs":
				op.Inputs, _ = d.strings(v, ow+".inputs")
			case "outputs":
				op.Outputs, _ = d.strings(v, ow+".outputs")
			case "attrs":
				attrNode = v
				d.fields(v, ow+".attrs", nil, func(key string, k, v *yaml.Node) { raw[key] = v })
			case "section":
				if s, ok := d.str(v, ow+".section"); ok {
					sec, ok := ParseSection(s)
					if !ok {
						d.errorf(v, "section %q is not forward, backward or optimize%s", s, suggest(s, sectionNames[:]))
					}
					op.Section = sec
				}
			case "place":
				op.Place = d.place(v, ow)
			case "param":
				op.Param, _ = d.str(v, ow+".param")
			}
		}) {
			continue
		}
		if typeNode == nil {
			d.errorf(it, "op %s needs a type", ow)
			continue
		}
		def, ok := ops.Lookup(op.Type)
		if !ok {
			d.errorf(typeNode, "unknown op %q%s; run `psgraph ops` for the catalog", op.Type, suggest(op.Type, ops.Names()))
			continue
		}
		if attrNode == nil {
			attrNode = it
		}
		if template {
			op.raw = raw
			op.rawAt = attrNode
		} else {
			op.Attrs = d.attrs(attrNode, raw, def.Attrs, "op "+op.Type, nil)
		}
		if len(op.Outputs) == 0 && len(def.Outputs) > 0 {
			d.errorf(it, "op %s (%s) needs outputs: one name for each of %v", ow, op.Type, def.Outputs)
			continue
		}
		out = append(out, op)
	}
	return out
}

func (d *decoder) assigns(n *yaml.Node) []Assign {
	var out []Assign
	d.fields(n, "assign", nil, func(key string, k, v *yaml.Node) {
		if val, ok := d.str(v, "assign."+key); ok {
			out = append(out, Assign{Target: key, Value: val, Pos: d.pos(k)})
		}
	})
	return out
}

var trainKeys = []string{"loss", "metrics", "batch", "steps", "epochs", "optimizer", "eval_every", "clip"}

func (d *decoder) train(n *yaml.Node) *Train {
	t := &Train{Pos: d.pos(n)}
	hasBatch := false
	var stepsNode, epochsNode *yaml.Node
	d.fields(n, "train", trainKeys, func(key string, k, v *yaml.Node) {
		switch key {
		case "loss":
			t.Loss, _ = d.str(v, "train.loss")
			t.LossPos = d.pos(v)
		case "metrics":
			t.Metrics, _ = d.strings(v, "train.metrics")
			if v.Kind == yaml.SequenceNode && len(t.Metrics) == len(v.Content) {
				for _, m := range v.Content {
					t.MetricPos = append(t.MetricPos, d.pos(m))
				}
			}
		case "batch":
			hasBatch = true
			if x, ok := d.integer(v, "train.batch"); ok {
				if x <= 0 {
					d.errorf(v, "train.batch must be positive, got %d", x)
				}
				t.Batch = x
			}
		case "epochs":
			epochsNode = k
			if x, ok := d.integer(v, "train.epochs"); ok {
				if x <= 0 {
					d.errorf(v, "train.epochs must be positive, got %d", x)
				}
				t.Epochs = x
			}
		case "steps":
			stepsNode = k
			if x, ok := d.integer(v, "train.steps"); ok {
				if x <= 0 {
					d.errorf(v, "train.steps must be positive, got %d", x)
				}
				t.Steps = x
			}
		case "optimizer":
			t.Optimizer = d.optimizer(v)
		case "eval_every":
			t.evalEveryPos = d.pos(v)
			if x, ok := d.integer(v, "train.eval_every"); ok {
				if x <= 0 {
					d.errorf(v, "train.eval_every must be positive (evaluate the held-out data every N steps), got %d", x)
				}
				t.EvalEvery = x
			}
		case "clip":
			t.Clip = d.clip(v)
		}
	})
	if !hasBatch && n.Kind == yaml.MappingNode {
		d.errorf(n, "train needs batch (the per-trainer batch size)")
	}
	if stepsNode != nil && epochsNode != nil {
		d.errorf(epochsNode, "train has both steps (line %d) and epochs; keep one of them: epochs sets steps = ceil(epochs x rows / (batch x trainers))", stepsNode.Line)
	}
	return t
}

// clip parses train.clip: {value: V} and/or {norm: N}.
func (d *decoder) clip(n *yaml.Node) *Clip {
	c := &Clip{Pos: d.pos(n)}
	d.fields(n, "train.clip", []string{"value", "norm"}, func(key string, k, v *yaml.Node) {
		f, ok := d.number(v, "train.clip."+key)
		if !ok {
			return
		}
		if f <= 0 {
			d.errorf(v, "train.clip.%s must be positive, got %g", key, f)
		}
		if key == "value" {
			c.Value = f
		} else {
			c.Norm = f
		}
	})
	if n.Kind == yaml.MappingNode && c.Value == 0 && c.Norm == 0 && len(n.Content) == 0 {
		d.errorf(n, "train.clip needs value: <V> (each gradient element into [-V, V]) or norm: <N> (the global gradient norm at most N)")
	}
	return c
}
