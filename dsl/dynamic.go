package dsl

import (
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
)

// Dynamic is a dynamic table's declaration (params.P.dynamic): a table of
// 64-bit keys whose rows are created when a key is admitted and removed
// when it expires or is evicted (issue 23, exec/dyntable). Its shape is
// [ir.DynamicRows, Dim]: shape rules read only Dim.
type Dynamic struct {
	Dim int
	// MinCount: sightings before a key gets a row (0, 1: the first).
	MinCount int
	// Probability, in (0, 1]: each sighting from the MinCount-th on
	// admits the key with this probability (0: not given, always).
	Probability float64
	// SketchBytes bounds the admission sketch's memory, which grows with
	// the distinct keys seen (0: the default, 64 MiB).
	SketchBytes int
	// TTLSteps > 0 removes a row unseen for that many steps.
	TTLSteps int
	// Capacity > 0 bounds the live rows, evicting by Policy.
	Capacity int
	Policy   string // "lru" (default) or "lfu"
	// Shard is set on a pserver's shard of a table split over pservers
	// (psgraph split writes it: shard: {of: T, index: j, count: M}): the
	// shard holds the keys k with dyntable.ShardOf(k, M) == j of table Of,
	// whose name seeds its rows and names its files.
	Shard *DynamicShard
	Pos   Pos
}

// DynamicShard is which part of a dynamic table a pserver's shard holds.
type DynamicShard struct {
	Of           string
	Index, Count int
}

// TableName is the name of the dynamic table a variable holds or is a
// shard of: what seeds its rows and names it in model files.
func (d *Dynamic) TableName(name string) string {
	if d != nil && d.Shard != nil {
		return d.Shard.Of
	}
	return name
}

// DynamicPolicies are the eviction policies of a dynamic table with a capacity.
var DynamicPolicies = []string{"lru", "lfu"}

// dynamicKeys are the keys of params.P.dynamic.
var dynamicKeys = []string{"dim", "min_count", "probability", "sketch_bytes", "ttl_steps", "capacity", "policy", "shard"}

// DynamicInits are the initializers a dynamic table takes: each draws a
// row from (seed, key) alone (he_normal and xavier_uniform read a row
// count the table does not have).
var DynamicInits = []string{"zeros", "constant", "uniform", "normal"}

// dynamic parses params.P.dynamic.
func (d *decoder) dynamic(n *yaml.Node, what string) *Dynamic {
	dy := &Dynamic{Pos: d.pos(n), Policy: "lru"}
	var policyNode *yaml.Node
	hasDim := false
	if !d.fields(n, what, dynamicKeys, func(key string, k, v *yaml.Node) {
		w := what + "." + key
		switch key {
		case "dim":
			hasDim = true
			if x, ok := d.integer(v, w); ok {
				if x < 1 {
					d.errorf(v, "%s must be at least 1 (the floats of a row), got %d", w, x)
				}
				dy.Dim = x
			}
		case "min_count":
			if x, ok := d.integer(v, w); ok {
				if x < 0 || x > 256 {
					d.errorf(v, "%s must be in [0, 256] (the admission sketch counts up to 256 sightings), got %d", w, x)
				}
				dy.MinCount = x
			}
		case "probability":
			if f, ok := d.number(v, w); ok {
				if f <= 0 || f > 1 {
					d.errorf(v, "%s must be in (0, 1] (the chance that a sighting admits the key), got %g", w, f)
				}
				dy.Probability = f
			}
		case "sketch_bytes":
			if x, ok := d.integer(v, w); ok {
				if x < 1024 {
					d.errorf(v, "%s must be at least 1024 bytes, got %d", w, x)
				}
				dy.SketchBytes = x
			}
		case "ttl_steps":
			if x, ok := d.integer(v, w); ok {
				if x < 0 {
					d.errorf(v, "%s must be 0 (no expiry) or more steps, got %d", w, x)
				}
				dy.TTLSteps = x
			}
		case "capacity":
			if x, ok := d.integer(v, w); ok {
				if x < 0 {
					d.errorf(v, "%s must be 0 (unbounded) or more rows, got %d", w, x)
				}
				dy.Capacity = x
			}
		case "policy":
			policyNode = v
			if s, ok := d.str(v, w); ok {
				if !contains(DynamicPolicies, s) {
					d.errorf(v, "%s %q is not one of %s%s", w, s, strings.Join(DynamicPolicies, ", "), suggest(s, DynamicPolicies))
				}
				dy.Policy = s
			}
		case "shard":
			dy.Shard = d.dynamicShard(v, w)
		}
	}) {
		return nil
	}
	switch {
	case !hasDim:
		d.errorf(n, "%s needs dim: the floats of a row, e.g. dynamic: {dim: 16}", what)
	case policyNode != nil && dy.Capacity == 0:
		d.errorf(policyNode, "%s.policy applies to a table with a capacity: add capacity: <rows>, or remove policy", what)
	case dy.Policy == "lfu" && dy.TTLSteps > 0:
		d.errorf(policyNode, "%s: lfu eviction cannot be combined with ttl_steps (an lfu table orders its rows by frequency, not by step); use policy: lru with ttl_steps", what)
	}
	return dy
}

// dynamicShard parses params.P.dynamic.shard: {of, index, count}, which
// psgraph split writes into a pserver's graph.
func (d *decoder) dynamicShard(n *yaml.Node, what string) *DynamicShard {
	sh := &DynamicShard{}
	has := 0
	d.fields(n, what, []string{"of", "index", "count"}, func(key string, _, v *yaml.Node) {
		has++
		switch key {
		case "of":
			sh.Of, _ = d.str(v, what+".of")
		case "index":
			sh.Index, _ = d.integer(v, what+".index")
		case "count":
			sh.Count, _ = d.integer(v, what+".count")
		}
	})
	if has != 3 || sh.Of == "" || sh.Count < 1 || sh.Index < 0 || sh.Index >= sh.Count {
		d.errorf(n, "%s must be {of: <table>, index: j, count: M} with 0 <= j < M (psgraph split writes it for a pserver's shard of a dynamic table)", what)
		return nil
	}
	return sh
}

// checkDynamicVar checks what a dynamic parameter's declaration may hold
// beside dynamic: its init and optimizer, no shape, block or dtype.
func (d *decoder) checkDynamicVar(vr *Var, v *yaml.Node, what string) {
	at := func(key string) *yaml.Node {
		for i := 0; i+1 < len(v.Content); i += 2 {
			if v.Content[i].Value == key {
				return v.Content[i]
			}
		}
		return v
	}
	for _, key := range []string{"shape", "block", "of", "dtype", "place"} {
		if n := at(key); n != v {
			fix := map[string]string{
				"shape": "its rows come and go with the keys: give the row width as dynamic.dim and remove shape",
				"block": "psgraph split shards a dynamic table itself",
				"of":    "only optimizer state belongs to a parameter",
				"dtype": "a dynamic table holds float32 rows",
				"place": "a dynamic table lives with the node that trains it",
			}[key]
			d.errorf(n, "%s: a dynamic table takes no %s: %s", what, key, fix)
		}
	}
	if vr.Init != nil && vr.Init.Type != "" && !contains(DynamicInits, vr.Init.Type) {
		d.errorf(at("init"), "%s: a dynamic table's rows are drawn from (seed, key) alone, so init %s (which reads the table's row count) does not apply; use %s", what, vr.Init.Type, strings.Join(DynamicInits, ", "))
	}
	if vr.Dynamic != nil {
		vr.Shape = ir.Shape{ir.DynamicRows, vr.Dynamic.Dim}
	}
}

// IsDynamic reports whether v is a dynamic table (params.P.dynamic).
func (v *Var) IsDynamic() bool { return v != nil && v.Dynamic != nil }

// DynamicParams lists the dynamic tables, in declaration order.
func (g *Graph) DynamicParams() []string {
	var out []string
	for _, n := range g.Order {
		if g.Vars[n].IsDynamic() {
			out = append(out, n)
		}
	}
	return out
}

// checkDynamicReaders checks that a dynamic table is read only as the
// table of lookup_table or embedding_bag (and their gradients and the
// optimizer's row gathers, which expansion adds).
func (g *Graph) checkDynamicReaders() ErrorList {
	dynamic := map[string]bool{}
	for name, v := range g.Vars {
		if v.IsDynamic() {
			dynamic[name] = true
		}
	}
	if len(dynamic) == 0 {
		return nil // most models: no lookup per input of every op
	}
	var errs ErrorList
	for _, op := range g.Ops {
		for i, in := range op.Inputs {
			if !dynamic[in] {
				continue
			}
			def, _ := ops.Lookup(op.Type)
			table := def != nil && i == 0 && def.ReadsTable ||
				def != nil && i == 2 && def.RowGrad ||
				op.Type == "gather_rows" && i == 0 ||
				op.Type == "serve_rows" && i == 0 // a pserver's shard
			if !table {
				errs = append(errs, Errorf(op.Pos, "op %s reads dynamic table %q as its input %d; a dynamic table's rows exist only for the keys looked up, so only lookup_table and embedding_bag (as their table) read it", op.Type, in, i))
			}
		}
	}
	return errs
}
