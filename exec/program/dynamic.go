package program

import (
	"fmt"
	"hash/fnv"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/dyntable"
	"github.com/psgraph/psgraph/exec/kernels"
)

// bindTables gives each dynamic table of the program its storage: the
// one opt.Tables holds, or a new table (training only: an evaluation
// reads a trained table).
func (p *Program) bindTables(opt CompileOptions) (map[string]*kernels.Dynamic, error) {
	if len(p.Lowered) == 0 {
		return nil, nil
	}
	p.Tables = map[string]*dyntable.Table{}
	out := map[string]*kernels.Dynamic{}
	for _, dt := range p.Lowered {
		t := opt.Tables[dt.Name]
		if t == nil && opt.Targets != nil {
			return nil, fmt.Errorf("dynamic table %s: an evaluation or prediction reads a trained table, and none was given (a model file holds it as %s.keys and %s)", dt.Name, dt.Name, dt.Name)
		}
		if t == nil {
			var err error
			if t, err = NewTable(dt); err != nil {
				return nil, err
			}
		}
		p.Tables[dt.Name] = t
		out[dt.Name] = kernels.NewDynamic(t)
	}
	return out, nil
}

// NewTable makes an empty dyntable.Table for dynamic table dt: its rows
// drawn by (seed, key) as exec/program draws row key of a fixed table
// with the same initializer and seed (Initialize), its optimizer state
// starting at the state's constant initializer.
func NewTable(dt dsl.DynamicTable) (*dyntable.Table, error) {
	dy := dt.Dynamic
	cfg := dyntable.Config{
		Dim: dy.Dim, StateWidth: dt.StateWidth, Seed: InitSeed(dt.Init, dt.Name),
		MinCount: dy.MinCount, AdmitProb: dy.Probability, SketchBytes: dy.SketchBytes,
		TTL: int64(dy.TTLSteps), Capacity: dy.Capacity,
	}
	if dy.Policy == "lfu" {
		cfg.Evict = dyntable.LFU
	}
	in := dt.Init
	switch in.Type {
	case "zeros":
		cfg.Init = dyntable.Init{Kind: dyntable.Zeros}
	case "constant":
		cfg.Init = dyntable.Init{Kind: dyntable.Constant, Value: in.Attrs.Float("value")}
	case "uniform":
		cfg.Init = dyntable.Init{Kind: dyntable.Uniform, Min: in.Attrs.Float("min"), Max: in.Attrs.Float("max")}
	case "normal":
		cfg.Init = dyntable.Init{Kind: dyntable.Normal, Mean: in.Attrs.Float("mean"), Std: in.Attrs.Float("std")}
	default:
		return nil, dsl.Errorf(in.Pos, "dynamic table %s: init %s draws from the table's row count; use %v", dt.Name, in.Type, dsl.DynamicInits)
	}
	if dt.StateWidth > 0 {
		cfg.StateInit = make([]float32, 0, dt.StateWidth)
		for _, st := range dt.State {
			v := 0.0
			switch st.Init.Type {
			case "zeros":
			case "constant":
				v = st.Init.Attrs.Float("value")
			default:
				return nil, dsl.Errorf(st.Init.Pos, "dynamic table %s: optimizer state %s starts from init %s; a dynamic table's state starts from a constant (zeros or constant)", dt.Name, st.Name, st.Init.Type)
			}
			for range st.Width {
				cfg.StateInit = append(cfg.StateInit, float32(v))
			}
		}
	}
	t, err := dyntable.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dt.Name, err)
	}
	return t, nil
}

// InitSeed is the seed initializer in draws variable name from: its seed
// attribute, else a hash of the name.
func InitSeed(in *dsl.Init, name string) uint64 {
	if in.Attrs.Has("seed") {
		return uint64(in.Attrs.Int("seed"))
	}
	h := fnv.New64a()
	h.Write([]byte(name))
	return h.Sum64()
}
