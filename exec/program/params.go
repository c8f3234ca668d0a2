package program

// Parameters in and out of a program: --init-from and --save.

import (
	"fmt"
	"sort"

	"github.com/psgraph/psgraph/exec/modelfile"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/progress"
	"github.com/psgraph/psgraph/exec/tensor"
)

// InitOptions configures Init.
type InitOptions struct {
	From    string // a safetensors file with the values ("": the initializers)
	Partial bool   // skip the file's tensors this node does not hold
	// Select, when set, names the file's tensors to read (the others are
	// not read at all): a node that takes a few tensors of a large file.
	Select   func(name string) bool
	Progress *progress.Reporter
}

// Init gives every persistent variable of the program its initial value,
// from the initializers or by name from a safetensors file (with
// Partial, skipping the file's tensors this node does not hold: a pserver
// holds some of the parameters), and reports the progress of drawing the initializers'
// values (tables of millions of rows take seconds) to o.Progress.
func Init(p *Program, o InitOptions) error {
	initFrom, partial := o.From, o.Partial
	g := p.Graph
	var loaded map[string]*tensor.Tensor
	if initFrom != "" {
		var err error
		if loaded, _, err = modelfile.LoadSafetensorsOf(initFrom, o.Select); err != nil {
			return err
		}
		if err := loadTables(p, loaded, initFrom); err != nil {
			return err
		}
		var unknown []string
		for name := range loaded {
			if v := g.Vars[name]; (v == nil || !v.Kind.Persistent()) && !g.HasBlocksOf(name) {
				unknown = append(unknown, name)
			}
		}
		if len(unknown) > 0 && !partial {
			sort.Strings(unknown)
			return fmt.Errorf("%s: tensors %v are not parameters or optimizer state of %s (parameters: %v)", initFrom, unknown, g.Name, g.Params())
		}
	}
	var ph *progress.Phase
	if o.Progress != nil {
		var total int64
		for _, name := range g.Order {
			v := g.Vars[name]
			t, ok := p.Scope[name]
			if fromFile := loaded[name] != nil || v.Block != nil && loaded[v.Block.Of] != nil; ok && v.Kind.Persistent() && !fromFile {
				total += int64(t.Numel())
			}
		}
		ph = o.Progress.Start("initializing the parameters", "values", total)
	}
	defer ph.Done()
	for _, name := range g.Order {
		v := g.Vars[name]
		t, ok := p.Scope[name]
		if !v.Kind.Persistent() || !ok {
			continue
		}
		if src, ok := loaded[name]; ok {
			if !src.Shape.Equal(t.Shape) || src.DType != t.DType {
				return fmt.Errorf("%s: %q is %s%v in the file but %s%v in the model", initFrom, name, src.DType, src.Shape, t.DType, t.Shape)
			}
			t.CopyFrom(src)
			continue
		}
		if b := v.Block; b != nil && loaded[b.Of] != nil {
			// A row block of a cut parameter: its rows of the whole.
			src := loaded[b.Of]
			if !src.Shape.Equal(b.Shape) || src.DType != t.DType {
				return fmt.Errorf("%s: %q is %s%v in the file but %s%v in the model", initFrom, b.Of, src.DType, src.Shape, t.DType, b.Shape)
			}
			row := src.Numel() / max(b.Shape[0], 1)
			for i := range b.Rows() {
				r := b.Start + i*b.Step()
				copy(t.F[i*row:(i+1)*row], src.F[r*row:(r+1)*row])
			}
			continue
		}
		if loaded != nil && v.Kind == dsl.KindParam {
			return fmt.Errorf("%s: parameter %q is missing from the file", initFrom, name)
		}
		seedName, full, row, step := v.InitTarget()
		if err := Initialize(t, v.Init, seedName, full, row, step, ph); err != nil {
			return err
		}
	}
	// Every page of the variables is there now (drawn, copied, or read
	// as zero): large ones may become huge pages from here on.
	for _, name := range g.Order {
		if t, ok := p.Scope[name]; ok && g.Vars[name].Kind.Persistent() {
			t.AdviseHuge()
		}
	}
	return nil
}
