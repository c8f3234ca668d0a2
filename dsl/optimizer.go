package dsl

import (
	"embed"
	"math"
	"sort"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"

	"github.com/psgraph/psgraph/dsl/ir"
)

// Template is an optimizer written in the DSL: per-parameter state and an
// update subgraph over $param, $grad, $<state> and hyper-parameters.
type Template struct {
	Name   string
	Hyper  map[string]float64 // defaults; NaN marks a required one
	State  []TemplateState
	Update []*Op
	Assign []Assign
	// Sparse, when set, is the update of a parameter whose gradient is
	// row-sparse (a lookup table) in place of Update and Assign: adam's
	// lazy form, torch.optim.SparseAdam's, differs from its dense one. It
	// gets the same touched-rows rewrite (docs/dsl.md, "Sparse tables").
	Sparse *TemplateUpdate
	Pos    Pos

	schedule *Schedule // a user template's lr: {schedule: ...}
}

// TemplateUpdate is one form of a template's update: its ops and assigns.
type TemplateUpdate struct {
	Update []*Op
	Assign []Assign
	Pos    Pos
}

// TemplateState is one optimizer state variable per parameter.
type TemplateState struct {
	Name  string
	Shape ir.Shape // nil: the parameter's shape (or one value per row, PerRow)
	// PerRow (shape: rows) makes the state one value per row of the
	// parameter: its shape with every dimension after the first set to 1
	// ([V, 1] for a [V, D] table). On a table it is read and written for
	// the touched rows, like a state of the parameter's shape.
	PerRow bool
	Init   *Init
	// initNode is an init whose attributes are expressions over the
	// hyper-parameters (value: $initial_accumulator_value), decoded per
	// optimizer when the template is expanded.
	initNode *yaml.Node
	Pos      Pos
}

// stateShape is the shape of state st of a parameter of shape p.
func (st *TemplateState) stateShape(p ir.Shape) ir.Shape {
	switch {
	case st.PerRow:
		s := p.Clone()
		for i := 1; i < len(s); i++ {
			s[i] = 1
		}
		return s
	case st.Shape != nil:
		return st.Shape.Clone()
	}
	return p.Clone()
}

// forms returns the template's update forms: the dense one, then the
// sparse one if it has one.
func (t *Template) forms() []*TemplateUpdate {
	out := []*TemplateUpdate{{Update: t.Update, Assign: t.Assign, Pos: t.Pos}}
	if t.Sparse != nil {
		out = append(out, t.Sparse)
	}
	return out
}

// hasExpr reports whether a scalar under n holds an expression ($name).
func hasExpr(n *yaml.Node) bool {
	if n.Kind == yaml.ScalarNode {
		return strings.Contains(n.Value, "$")
	}
	for _, c := range n.Content {
		if hasExpr(c) {
			return true
		}
	}
	return false
}

//go:embed optimizers/*.yaml
var builtinFS embed.FS

var (
	builtinOnce sync.Once
	builtins    map[string]*Template
)

// Builtins returns the optimizers shipped inside the binary, by name.
func Builtins() map[string]*Template {
	builtinOnce.Do(func() {
		builtins = map[string]*Template{}
		entries, _ := builtinFS.ReadDir("optimizers")
		for _, e := range entries {
			name := strings.TrimSuffix(e.Name(), ".yaml")
			src, _ := builtinFS.ReadFile("optimizers/" + e.Name())
			var doc yaml.Node
			if err := yaml.Unmarshal(src, &doc); err != nil {
				panic("dsl: built-in optimizer " + name + ": " + err.Error())
			}
			d := &decoder{file: "builtin:" + e.Name()}
			t := d.template(doc.Content[0], name, true)
			if d.errs != nil {
				panic("dsl: built-in optimizer: " + d.errs.Error())
			}
			builtins[name] = t
		}
	})
	return builtins
}

// BuiltinNames lists the built-in optimizers.
func BuiltinNames() []string {
	var out []string
	for k := range Builtins() {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// template parses a template body. Built-ins declare `hyper:` defaults;
// user templates give hyper-parameters as top-level numbers (lr: 0.05).
func (d *decoder) template(n *yaml.Node, name string, builtin bool) *Template {
	t := &Template{Name: name, Hyper: map[string]float64{}, Pos: d.pos(n)}
	var assignNode, updateNode *yaml.Node
	d.fields(n, "optimizer", nil, func(key string, k, v *yaml.Node) {
		switch key {
		case "hyper":
			d.fields(v, "optimizer.hyper", nil, func(h string, _, hv *yaml.Node) {
				if hv.Tag == "!!null" {
					t.Hyper[h] = math.NaN()
				} else if f, ok := d.number(hv, "optimizer.hyper."+h); ok {
					t.Hyper[h] = f
				}
			})
		case "state":
			d.fields(v, "optimizer.state", nil, func(s string, sk, sv *yaml.Node) {
				st := TemplateState{Name: s, Pos: d.pos(sk)}
				d.fields(sv, "optimizer.state."+s, []string{"init", "shape"}, func(key string, _, vv *yaml.Node) {
					switch key {
					case "init":
						if hasExpr(vv) {
							st.initNode = vv // decoded with the hyper-parameters
							return
						}
						st.Init = d.init(vv, "optimizer.state."+s+".init")
					case "shape":
						if vv.Kind == yaml.ScalarNode && vv.Value == "rows" {
							st.PerRow = true
						} else if vv.Kind == yaml.ScalarNode && vv.Tag == "!!str" {
							d.errorf(vv, "optimizer.state.%s.shape must be a list of dimensions or rows (one value per row of the parameter), got %q", s, vv.Value)
						} else if sh, ok := d.ints(vv, "optimizer.state."+s+".shape"); ok {
							st.Shape = sh
						}
					}
				})
				if st.Init == nil && st.initNode == nil {
					st.Init = &Init{Type: "zeros", Pos: st.Pos}
				}
				t.State = append(t.State, st)
			})
		case "update":
			updateNode = v
		case "assign":
			assignNode = v
		case "sparse":
			t.Sparse = d.templateUpdate(v, "optimizer.sparse")
		case "type":
			d.errorf(k, "a user-defined optimizer has no type; use type: %s alone for a built-in", strings.Join(BuiltinNames(), "|"))
		default:
			if builtin {
				d.errorf(k, "unknown key %q in optimizer template", key)
				return
			}
			if key == "lr" && v.Kind == yaml.MappingNode {
				t.schedule, t.Hyper["lr"] = d.schedule(v, math.NaN())
				if math.IsNaN(t.Hyper["lr"]) {
					t.Hyper["lr"] = 1 // reported: the schedule needs value
				}
				return
			}
			if v.Kind != yaml.ScalarNode || v.Tag == "!!str" || v.Tag == "!!null" {
				d.errorf(k, "unknown key %q in a user-defined optimizer%s; its keys are state, update, assign, sparse and hyper-parameters with numeric values such as lr: 0.1", key, suggest(key, []string{"type", "state", "update", "assign", "sparse"}))
				return
			}
			if f, ok := d.number(v, "optimizer."+key+" (a hyper-parameter)"); ok {
				t.Hyper[key] = f
			}
		}
	})
	if updateNode == nil {
		d.errorf(n, "optimizer needs update: a list of ops over $param, $grad and its state")
	} else {
		t.Update = d.ops(updateNode, "optimizer.update", true)
	}
	if assignNode == nil {
		d.errorf(n, "optimizer needs assign: {$param: <new value>, ...}")
	} else {
		t.Assign = d.templateAssigns(assignNode, "optimizer assign")
	}
	return t
}

// templateUpdate parses a template's sparse form: {update: [...], assign: {...}}.
func (d *decoder) templateUpdate(n *yaml.Node, what string) *TemplateUpdate {
	u := &TemplateUpdate{Pos: d.pos(n)}
	var updateNode, assignNode *yaml.Node
	d.fields(n, what, []string{"update", "assign"}, func(key string, _, v *yaml.Node) {
		if key == "update" {
			updateNode = v
		} else {
			assignNode = v
		}
	})
	if n.Kind != yaml.MappingNode {
		return u
	}
	if updateNode == nil {
		d.errorf(n, "%s needs update: the ops that update a table's touched rows, over $param, $grad and its state", what)
	} else {
		u.Update = d.ops(updateNode, what+".update", true)
	}
	if assignNode == nil {
		d.errorf(n, "%s needs assign: {$param: <new value>, ...}", what)
	} else {
		u.Assign = d.templateAssigns(assignNode, what+".assign")
	}
	return u
}

// templateAssigns parses a template's assigns, which must set $param.
func (d *decoder) templateAssigns(n *yaml.Node, what string) []Assign {
	out := d.assigns(n)
	for _, a := range out {
		if a.Target == "$param" {
			return out
		}
	}
	d.errorf(n, "%s must set $param (the parameter's next value)", what)
	return out
}

// optimizer parses train.optimizer: a built-in by type with hyper-parameter
// overrides, or a user-defined template.
func (d *decoder) optimizer(n *yaml.Node) *Optimizer {
	o := &Optimizer{Pos: d.pos(n), Hyper: map[string]float64{}}
	if n.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == "type" {
				o.Type, _ = d.str(n.Content[i+1], "optimizer.type")
				if o.Type == "" {
					return o
				}
				tmpl, ok := Builtins()[o.Type]
				if !ok {
					d.errorf(n.Content[i+1], "unknown optimizer %q%s; built-in: %s (or write your own update subgraph)", o.Type, suggest(o.Type, BuiltinNames()), strings.Join(BuiltinNames(), ", "))
					return o
				}
				names := make([]string, 0, len(tmpl.Hyper))
				for h := range tmpl.Hyper {
					names = append(names, h)
				}
				sort.Strings(names)
				d.fields(n, "optimizer "+o.Type, append([]string{"type"}, names...), func(key string, _, v *yaml.Node) {
					if key == "type" {
						return
					}
					if key == "lr" && v.Kind == yaml.MappingNode {
						o.Schedule, o.Hyper["lr"] = d.schedule(v, tmpl.Hyper["lr"])
						return
					}
					if f, ok := d.number(v, "optimizer."+key); ok {
						o.Hyper[key] = f
					}
				})
				o.Tmpl = tmpl
				d.checkHyper(o, n)
				return o
			}
		}
	}
	o.Tmpl = d.template(n, "custom", false)
	o.Schedule = o.Tmpl.schedule
	if _, ok := o.Tmpl.Hyper["lr"]; !ok {
		d.errorf(n, "optimizer needs lr (the learning rate)")
	}
	d.checkHyper(o, n)
	return o
}

func (d *decoder) checkHyper(o *Optimizer, n *yaml.Node) {
	for _, h := range sortedKeys(o.Tmpl.Hyper) { // errors in one order
		def := o.Tmpl.Hyper[h]
		if _, set := o.Hyper[h]; !set {
			if math.IsNaN(def) {
				d.errorf(n, "optimizer %s needs %s: add %s: <number>", o.Tmpl.Name, h, h)
			}
			o.Hyper[h] = def
		}
	}
	at := func(key string) *yaml.Node {
		if n.Kind == yaml.MappingNode {
			for i := 0; i+1 < len(n.Content); i += 2 {
				if n.Content[i].Value == key {
					return n.Content[i+1]
				}
			}
		}
		return n
	}
	if lr, ok := o.Hyper["lr"]; ok && lr <= 0 {
		d.errorf(at("lr"), "optimizer lr must be positive, got %g", lr)
	}
	for _, l := range hyperLimits[o.Type] {
		if v, ok := o.Hyper[l.name]; ok && !l.ok(v) {
			d.errorf(at(l.name), "optimizer %s: %s must be %s, got %g", o.Type, l.name, l.want, v)
		}
	}
}

// hyperLimit is the range of a built-in hyper-parameter outside which the
// update is not the optimizer's (tf.keras.optimizers.Ftrl refuses the same).
type hyperLimit struct {
	name, want string
	ok         func(float64) bool
}

var hyperLimits = map[string][]hyperLimit{
	"ftrl": {
		{"beta", "0 or more", func(v float64) bool { return v >= 0 }},
		{"initial_accumulator_value", "0 or more", func(v float64) bool { return v >= 0 }},
		{"l1", "0 or more", func(v float64) bool { return v >= 0 }},
		{"l2", "0 or more", func(v float64) bool { return v >= 0 }},
		{"lr_power", "0 or less (-0.5: the accumulator's square root)", func(v float64) bool { return v <= 0 }},
	},
	"rowwise_adagrad": {
		{"eps", "0 or more", func(v float64) bool { return v >= 0 }},
	},
}

// ScheduleKinds are the built-in learning-rate schedules.
var ScheduleKinds = []string{"constant", "cosine", "exponential", "step"}

// schedule parses lr: {schedule: KIND, value: LR, warmup: W, ...} and
// returns the schedule and the rate it scales (value, else def; NaN def:
// value is required).
func (d *decoder) schedule(n *yaml.Node, def float64) (*Schedule, float64) {
	s := &Schedule{Pos: d.pos(n)}
	lr := def
	var gammaSet, everySet, minSet bool
	keys := []string{"schedule", "value", "warmup", "steps", "min_lr", "gamma", "every"}
	d.fields(n, "optimizer.lr", keys, func(key string, k, v *yaml.Node) {
		switch key {
		case "schedule":
			if kind, ok := d.str(v, "optimizer.lr.schedule"); ok {
				if !contains(ScheduleKinds, kind) {
					d.errorf(v, "unknown schedule %q%s; built-in: %s (or write your own with $step in an optimizer template)", kind, suggest(kind, ScheduleKinds), strings.Join(ScheduleKinds, ", "))
				}
				s.Kind = kind
			}
		case "value":
			if f, ok := d.number(v, "optimizer.lr.value"); ok {
				lr = f
			}
		case "warmup":
			if x, ok := d.integer(v, "optimizer.lr.warmup"); ok {
				if x < 0 {
					d.errorf(v, "optimizer.lr.warmup must be 0 or more steps, got %d", x)
				}
				s.Warmup = x
			}
		case "steps":
			if x, ok := d.integer(v, "optimizer.lr.steps"); ok {
				if x <= 0 {
					d.errorf(v, "optimizer.lr.steps must be positive, got %d", x)
				}
				s.Steps = x
			}
		case "min_lr":
			if f, ok := d.number(v, "optimizer.lr.min_lr"); ok {
				if f < 0 {
					d.errorf(v, "optimizer.lr.min_lr must be 0 or more, got %g", f)
				}
				s.MinLR, minSet = f, true
			}
		case "gamma":
			if f, ok := d.number(v, "optimizer.lr.gamma"); ok {
				if f <= 0 {
					d.errorf(v, "optimizer.lr.gamma must be positive, got %g", f)
				}
				s.Gamma, gammaSet = f, true
			}
		case "every":
			if x, ok := d.integer(v, "optimizer.lr.every"); ok {
				if x <= 0 {
					d.errorf(v, "optimizer.lr.every must be positive, got %d", x)
				}
				s.Every, everySet = x, true
			}
		}
	})
	if n.Kind != yaml.MappingNode {
		return s, lr
	}
	if math.IsNaN(lr) {
		d.errorf(n, "optimizer.lr needs value: the learning rate the schedule scales, e.g. lr: {value: 0.1, schedule: cosine}")
	}
	only := func(set bool, key string, kinds string) {
		if set {
			d.errorf(n, "optimizer.lr.%s applies to the %s schedule only, not %s", key, kinds, s.Kind)
		}
	}
	switch s.Kind {
	case "":
		d.errorf(n, "optimizer.lr needs schedule: one of %s", strings.Join(ScheduleKinds, ", "))
	case "constant":
		if s.Warmup == 0 {
			d.errorf(n, "a constant schedule without warmup is lr: <number>; add warmup: <steps> or write the number")
		}
		only(gammaSet, "gamma", "step and exponential")
		only(everySet, "every", "step")
		only(minSet, "min_lr", "cosine")
		only(s.Steps > 0, "steps", "cosine")
	case "cosine":
		only(gammaSet, "gamma", "step and exponential")
		only(everySet, "every", "step")
		if minSet && !math.IsNaN(lr) && s.MinLR >= lr {
			d.errorf(n, "optimizer.lr.min_lr %g must be below the rate %g it anneals from", s.MinLR, lr)
		}
	case "exponential", "step":
		if !gammaSet {
			d.errorf(n, "the %s schedule needs gamma: the factor the rate is multiplied by", s.Kind)
		}
		if s.Kind == "step" && !everySet {
			d.errorf(n, "the step schedule needs every: the number of steps between two multiplications by gamma")
		}
		if s.Kind == "exponential" {
			only(everySet, "every", "step")
		}
		only(minSet, "min_lr", "cosine")
		only(s.Steps > 0, "steps", "cosine")
	}
	return s, lr
}
