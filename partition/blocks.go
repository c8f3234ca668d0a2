package partition

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
)

// cutBlocks decides, per parameter, whether it is cut into row blocks.
func (s *splitter) cutBlocks() error {
	for _, gr := range s.byName {
		n := gr.param.Name
		shape := gr.param.Shape
		if gr.table {
			if err := s.shardTable(gr); err != nil {
				return err
			}
			continue
		}
		numel := shape.Numel()
		nb := 1
		switch {
		case gr.pin == trainerNode:
			gr.whole = "place: trainer"
		case gr.pin != "":
			gr.whole = "place: " + gr.pin + " (" + gr.pinBy + ")"
		case numel <= s.opt.MinBlockSize:
			gr.whole = strconv.Itoa(numel) + " elements <= min_block_size " + strconv.Itoa(s.opt.MinBlockSize)
		case s.opt.PServers == 1:
			gr.whole = "one pserver"
		case len(shape) == 0 || shape[0] < 2:
			gr.whole = "a single row cannot be cut along dim 0"
		default:
			if why := s.notElementWise(gr); why != "" {
				gr.whole = why
			} else {
				nb = min((numel+s.opt.MinBlockSize-1)/s.opt.MinBlockSize, s.opt.PServers, shape[0])
			}
		}
		rows := 1
		if len(shape) > 0 {
			rows = shape[0]
		}
		start := 0
		for j := range nb {
			r := rows / nb
			if j < rows%nb {
				r++
			}
			b := &block{g: gr, name: n, start: start, end: start + r, pserver: -1}
			if nb > 1 {
				b.name = BlockName(n, j)
				b.shape = append(ir.Shape{r}, shape[1:]...)
			} else {
				b.shape = shape.Clone()
			}
			b.bytes = b.shape.Numel() * gr.param.DType.Size()
			if len(shape) == 0 {
				b.bytes = gr.param.DType.Size()
			}
			gr.blocks = append(gr.blocks, b)
			start += r
		}
	}
	return nil
}

// shardTable cuts a lookup table into one shard per pserver: row r goes
// to pserver r mod M as its local row r div M, so the ids of a batch
// spread over every pserver whatever their distribution's head.
func (s *splitter) shardTable(gr *group) error {
	shape, m := gr.param.Shape, s.opt.PServers
	if gr.param.IsDynamic() {
		// Shard j holds the keys dyntable.ShardOf places there; its rows
		// come and go with them, so its bytes are not known up front.
		gr.whole = fmt.Sprintf("a dynamic table: sharded by key over %d pservers (key k on pserver dyntable.ShardOf(k, %d))", m, m)
		for j := range m {
			gr.blocks = append(gr.blocks, &block{g: gr, name: ShardName(gr.param.Name, j), start: j, end: j + 1, stride: m, pserver: j, shape: shape.Clone()})
		}
		return nil
	}
	if shape[0] < m {
		return dsl.Errorf(gr.param.Pos, "lookup table %s has %d rows, fewer than the %d pservers it would be sharded over; use at most %d pservers", gr.param.Name, shape[0], m, shape[0])
	}
	gr.whole = fmt.Sprintf("a lookup table: sharded by row id mod %d (row r on pserver r mod %d as its local row r div %d)", m, m, m)
	for j := range m {
		rows := (shape[0] - j + m - 1) / m
		b := &block{g: gr, name: ShardName(gr.param.Name, j), start: j, end: shape[0], stride: m, pserver: j,
			shape: append(ir.Shape{rows}, shape[1:]...)}
		b.bytes = b.shape.Numel() * gr.param.DType.Size()
		gr.blocks = append(gr.blocks, b)
	}
	return nil
}

// ShardName is the variable name of shard j of lookup table p.
func ShardName(p string, j int) string { return p + ".s" + strconv.Itoa(j) }

// notElementWise explains why a parameter's optimizer cannot run on row
// blocks, or returns "". It can when every op is element-wise and every
// value it touches has the parameter's shape (cut like the parameter) or
// one element (a scalar such as adam's bias1, kept whole in every
// block, where it evolves identically).
func (s *splitter) notElementWise(gr *group) string {
	shape := gr.param.Shape
	fits := func(name string) bool {
		t := s.g.Types[name]
		return t.Shape.Equal(shape) || t.Shape.Numel() == 1
	}
	for _, st := range gr.state {
		if !fits(st.Name) {
			return fmt.Sprintf("state %s has shape %v, neither %s's shape %v nor a scalar", st.Name, st.Shape, gr.param.Name, shape)
		}
	}
	for _, op := range gr.ops {
		def, _ := ops.Lookup(op.Type)
		if op.Type == "sum_squares" && s.clipNorm > 0 {
			continue // a block's part of the norm, added up with the others
		}
		if !def.ElementWise {
			return fmt.Sprintf("optimizer op %s at %s is not element-wise", op.Type, op.Pos)
		}
		for _, x := range append(append([]string{}, op.Inputs...), op.Outputs...) {
			if !fits(x) {
				return fmt.Sprintf("optimizer op %s at %s touches %s of shape %v, neither %s's shape %v nor a scalar", op.Type, op.Pos, x, s.g.Types[x].Shape, gr.param.Name, shape)
			}
		}
	}
	return ""
}

// assignPServers places blocks by bytes: pinned blocks first, then the
// others largest first (ties by name) on the least loaded pserver (ties by
// index) that holds no other block of the same parameter.
func (s *splitter) assignPServers() {
	load := make([]int, s.opt.PServers)
	var free []*block
	for _, gr := range s.byName {
		for _, b := range gr.blocks {
			switch {
			case gr.pin == trainerNode:
			case gr.table:
				load[b.pserver] += b.bytes
			case gr.pin != "":
				b.pserver, _ = strconv.Atoi(strings.TrimPrefix(gr.pin, "pserver:"))
				load[b.pserver] += b.bytes
			default:
				free = append(free, b)
			}
		}
	}
	sort.Slice(free, func(i, j int) bool {
		if free[i].bytes != free[j].bytes {
			return free[i].bytes > free[j].bytes
		}
		return free[i].name < free[j].name
	})
	for _, b := range free {
		best := -1
		for i := range load {
			if b.cut() && b.g.holds(i) {
				continue
			}
			if best < 0 || load[i] < load[best] {
				best = i
			}
		}
		b.pserver = best
		load[best] += b.bytes
	}
}

func (gr *group) holds(pserver int) bool {
	for _, b := range gr.blocks {
		if b.pserver == pserver {
			return true
		}
	}
	return false
}
