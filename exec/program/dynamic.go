package program

import (
	"fmt"
	"hash/fnv"
	"io"
	"slices"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/dyntable"
	"github.com/psgraph/psgraph/exec/kernels"
	"github.com/psgraph/psgraph/exec/modelfile"
	"github.com/psgraph/psgraph/exec/tensor"
)

// bindTables gives each dynamic table of the program its storage: the
// one opt.Tables holds, or a new table (training only: an evaluation
// reads a trained table).
func (p *Program) bindTables(opt CompileOptions) (map[string]*kernels.Dynamic, error) {
	out := remoteTables(p.Graph)
	if len(p.Lowered) == 0 {
		return out, nil
	}
	p.Tables = map[string]*dyntable.Table{}
	if out == nil {
		out = map[string]*kernels.Dynamic{}
	}
	for _, dt := range p.Lowered {
		t := opt.Tables[dt.Name]
		if rows, ok := opt.Shared[dt.Name]; ok && t == nil && rows != nil {
			// a model file's keys and rows (modelfile.LoadModel)
			var err error
			if t, err = ReadTable(dt, opt.Shared[dyntable.KeysName(dt.Name)], rows, "the model file"); err != nil {
				return nil, err
			}
		}
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

// remoteTables gives each dynamic table a trainer of a split job fetches
// (fetch_rows of shape [dynamic, D]) the step's key index its fetch,
// dyn_pos and send_rows share; the table itself lives on the pservers.
func remoteTables(g *dsl.Graph) map[string]*kernels.Dynamic {
	var out map[string]*kernels.Dynamic
	for _, op := range g.Ops {
		if shape := op.Attrs.Ints("shape"); op.Type == "fetch_rows" && len(shape) == 2 && shape[0] == ir.DynamicRows {
			if out == nil {
				out = map[string]*kernels.Dynamic{}
			}
			out[op.Attrs.String("var")] = kernels.NewDynamic(nil)
		}
	}
	return out
}

// NewTable makes an empty dyntable.Table for dynamic table dt: its rows
// drawn by (seed, key) as exec/program draws row key of a fixed table
// with the same initializer and seed (Initialize), its optimizer state
// starting at the state's constant initializer.
func NewTable(dt dsl.DynamicTable) (*dyntable.Table, error) {
	cfg, err := TableConfig(dt)
	if err != nil {
		return nil, err
	}
	t, err := dyntable.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", dt.Name, err)
	}
	return t, nil
}

// TableConfig is the configuration of dynamic table dt's storage (a
// pserver's shard of it holds its part of the capacity).
func TableConfig(dt dsl.DynamicTable) (dyntable.Config, error) {
	dy := dt.Dynamic
	cfg := dyntable.Config{
		Dim: dy.Dim, StateWidth: dt.StateWidth, Seed: InitSeed(dt.Init, dy.TableName(dt.Name)),
		MinCount: dy.MinCount, AdmitProb: dy.Probability, SketchBytes: dy.SketchBytes,
		TTL: int64(dy.TTLSteps), Capacity: dy.Capacity,
	}
	if sh := dy.Shard; sh != nil && dy.Capacity > 0 {
		// A pserver's shard of a table split over Count pservers holds its
		// part of the capacity (the keys spread evenly over the shards).
		cfg.Capacity = (dy.Capacity + sh.Count - 1) / sh.Count
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
		return cfg, dsl.Errorf(in.Pos, "dynamic table %s: init %s draws from the table's row count; use %v", dt.Name, in.Type, dsl.DynamicInits)
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
				return cfg, dsl.Errorf(st.Init.Pos, "dynamic table %s: optimizer state %s starts from init %s; a dynamic table's state starts from a constant (zeros or constant)", dt.Name, st.Name, st.Init.Type)
			}
			for range st.Width {
				cfg.StateInit = append(cfg.StateInit, float32(v))
			}
		}
	}
	return cfg, nil
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

// TableKeys lists a table's live keys in ascending order: the order of
// its keys and rows in a model file. It holds 8 bytes a row; the rows
// stay in the table.
func TableKeys(t *dyntable.Table) ([]int64, error) {
	c, err := t.Cut(dyntable.Export)
	if err != nil {
		return nil, err
	}
	defer c.Abort() // after Commit it does nothing
	keys := make([]int64, 0, t.Stats().Live)
	if err := c.Each(func(b *dyntable.Batch) error {
		keys = append(keys, b.Keys...)
		return nil
	}); err != nil {
		return nil, err
	}
	if err := c.Commit(); err != nil {
		return nil, err
	}
	slices.Sort(keys)
	return keys, nil
}

// tableChunk is the rows TableEntries reads from a table and writes at a
// time: about 1 MiB of values.
func tableChunk(dim int) int { return max(1, (1<<20)/(4*dim)) }

// TableEntries are dynamic table name's two tensors of a model file, its
// keys (int64 [n], ascending) and their values (float32 [n, dim]), written
// as the file is: the rows are read from the table a chunk at a time
// (Table.Read), so saving a table takes its keys' 8 bytes a row and one
// chunk beside it, not a copy of the rows (TestTableEntriesStreamTheRows).
// Nothing may change the table until the file is written.
func TableEntries(name string, t *dyntable.Table) ([]modelfile.Entry, error) {
	keys, err := TableKeys(t)
	if err != nil {
		return nil, err
	}
	dim := t.Config().Dim
	return []modelfile.Entry{
		{Name: dyntable.KeysName(name), DType: tensor.I64, Shape: []int{len(keys)}, Write: func(w io.Writer) error {
			_, err := w.Write(tensor.I64Bytes(keys))
			return err
		}},
		{Name: name, DType: tensor.F32, Shape: []int{len(keys), dim}, Write: func(w io.Writer) error {
			per := tableChunk(dim)
			buf := make([]float32, per*dim)
			for lo := 0; lo < len(keys); lo += per {
				hi := min(lo+per, len(keys))
				out := buf[:(hi-lo)*dim]
				if err := t.Read(keys[lo:hi], out); err != nil {
					return fmt.Errorf("dynamic table %s: %w", name, err)
				}
				if _, err := w.Write(tensor.F32Bytes(out)); err != nil {
					return err
				}
			}
			return nil
		}},
	}, nil
}

// checkTableTensors checks a model file's keys and rows of dynamic table
// dt: int64 [n] and float32 [n, dim], the keys distinct and not padding.
func checkTableTensors(dt dsl.DynamicTable, keys, rows *tensor.Tensor, file string) error {
	dim := dt.Dynamic.Dim
	switch {
	case keys == nil || rows == nil:
		return fmt.Errorf("%s: dynamic table %s needs tensors %s (int64 keys) and %s (their rows); give the file psgraph saved for this model (--save)", file, dt.Name, dyntable.KeysName(dt.Name), dt.Name)
	case keys.DType != tensor.I64 || len(keys.Shape) != 1:
		return fmt.Errorf("%s: %s is %s%v, want int64 [n] keys", file, dyntable.KeysName(dt.Name), keys.DType, keys.Shape)
	case rows.DType != tensor.F32 || len(rows.Shape) != 2 || rows.Shape[1] != dim || rows.Shape[0] != keys.Shape[0]:
		return fmt.Errorf("%s: %s is %s%v, want float32 [%d, %d]: a row of dim %d per key of %s", file, dt.Name, rows.DType, rows.Shape, keys.Shape[0], dim, dim, dyntable.KeysName(dt.Name))
	}
	seen := make(map[int64]struct{}, len(keys.L))
	for i, k := range keys.L {
		if k == ir.PadKey {
			return fmt.Errorf("%s: key %d of %s is the padding key %d, which no row has", file, i, dyntable.KeysName(dt.Name), k)
		}
		if _, dup := seen[k]; dup {
			return fmt.Errorf("%s: key %d appears twice in %s", file, k, dyntable.KeysName(dt.Name))
		}
		seen[k] = struct{}{}
	}
	return nil
}

// LoadTable fills table t with a model file's keys and rows of dynamic
// table dt (before any step): each key is admitted, as if seen
// max(min_count, 1) times at step 0, and gets its row's value; its
// optimizer state starts anew.
func LoadTable(t *dyntable.Table, dt dsl.DynamicTable, keys, rows *tensor.Tensor, file string) error {
	if err := checkTableTensors(dt, keys, rows, file); err != nil {
		return err
	}
	n := len(keys.L)
	counts := make([]uint32, n)
	for i := range counts {
		counts[i] = uint32(max(dt.Dynamic.MinCount, 1))
	}
	slots := make([]int32, n)
	if err := t.Lookup(keys.L, counts, slots); err != nil {
		return fmt.Errorf("%s: %s: %w", file, dt.Name, err)
	}
	for i, s := range slots {
		if s == dyntable.NoRow {
			return fmt.Errorf("%s: key %d of %s was not admitted when loaded (probability %g or a capacity of %d below the file's %d rows); load it into a table without them", file, keys.L[i], dt.Name, dt.Dynamic.Probability, dt.Dynamic.Capacity, n)
		}
	}
	return t.Scatter(slots, 0, dt.Dynamic.Dim, rows.F)
}

// ReadTable is a lookup-only table of a model file's keys and rows of
// dynamic table dt: evaluation and prediction read it, unseen keys
// reading zeros.
func ReadTable(dt dsl.DynamicTable, keys, rows *tensor.Tensor, file string) (*dyntable.Table, error) {
	t, err := dyntable.New(dyntable.Config{Dim: dt.Dynamic.Dim})
	if err != nil {
		return nil, err
	}
	plain := dt
	plain.Dynamic = &dsl.Dynamic{Dim: dt.Dynamic.Dim}
	if err := LoadTable(t, plain, keys, rows, file); err != nil {
		return nil, err
	}
	return t, nil
}

// loadTables fills the program's dynamic tables from the tensors of an
// --init-from file, and takes those tensors out of loaded.
func loadTables(p *Program, loaded map[string]*tensor.Tensor, file string) error {
	for _, dt := range p.Lowered {
		name := dt.Dynamic.TableName(dt.Name) // a pserver's shard reads its table's
		keys, rows := loaded[dyntable.KeysName(name)], loaded[name]
		if rows == nil {
			return fmt.Errorf("%s: parameter %q (a dynamic table) is missing from the file", file, name)
		}
		if sh := dt.Dynamic.Shard; sh != nil {
			if err := checkTableTensors(dt, keys, rows, file); err != nil {
				return err
			}
			keys, rows = shardRows(keys, rows, sh)
		}
		if err := LoadTable(p.Tables[dt.Name], dt, keys, rows, file); err != nil {
			return err
		}
		delete(loaded, dyntable.KeysName(name))
		delete(loaded, name)
	}
	return nil
}

// shardRows is the keys of a model file's dynamic table that a pserver's
// shard holds (dyntable.ShardOf), and their rows.
func shardRows(keys, rows *tensor.Tensor, sh *dsl.DynamicShard) (*tensor.Tensor, *tensor.Tensor) {
	d := rows.RowWidth()
	var ks []int64
	var vs []float32
	for i, k := range keys.L {
		if dyntable.ShardOf(k, sh.Count) == sh.Index {
			ks = append(ks, k)
			vs = append(vs, rows.F[i*d:(i+1)*d]...)
		}
	}
	kt := tensor.New(tensor.I64, tensor.Shape{len(ks)})
	copy(kt.L, ks)
	rt := tensor.New(tensor.F32, tensor.Shape{len(ks), d})
	copy(rt.F, vs)
	return kt, rt
}
