package dsl

import (
	"fmt"
	"slices"
	"strings"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
)

// TransferKind is what a transfer of a placed graph carries.
type TransferKind uint8

const (
	// ParamTransfer is a parameter block, from its pserver to the trainers
	// (a pserver's send, with the block's initial value before step 0; a
	// trainer's recv).
	ParamTransfer TransferKind = iota + 1
	// GradTransfer is a gradient block, from a trainer to the block's
	// pserver (a trainer's send; a pserver's accumulate).
	GradTransfer
	// TableIDsTransfer is the ids a trainer asks a table shard for
	// (fetch_rows; serve_rows).
	TableIDsTransfer
	// TableRowsTransfer is the rows a shard answers (serve_rows; fetch_rows).
	TableRowsTransfer
	// TableGradTransfer is a shard's part of a table's row gradient
	// (send_rows; accumulate_rows).
	TableGradTransfer
	// ClipPartTransfer is a pserver's partial sum of squares of its
	// gradients, for train.clip.norm (a pserver's send; a trainer's recv).
	ClipPartTransfer
	// ClipFactorTransfer is the clip factor a trainer sends each pserver.
	ClipFactorTransfer
)

var transferKindNames = [...]string{"", "param", "grad", "table-ids", "table-rows", "table-grad", "clip-part", "clip-factor"}

func (k TransferKind) String() string {
	if int(k) < len(transferKindNames) {
		return transferKindNames[k]
	}
	return fmt.Sprintf("transfer(%d)", uint8(k))
}

// Table reports whether the transfer is one of a sharded table's.
func (k TransferKind) Table() bool {
	return k == TableIDsTransfer || k == TableRowsTransfer || k == TableGradTransfer
}

// Request reports whether the transfer asks for a reply rather than
// carrying a step's gradient (a table's ids).
func (k TransferKind) Request() bool { return k == TableIDsTransfer }

// A Transfer is one stream of messages of a placed graph, seen from the
// node whose graph it is: what it sends to, or receives from, one peer
// (Peer.Index -1: every trainer, or in async mode the one a piece came
// from). The catalog says which ops are transfers (ops.Def.Transfer);
// split computes a placed graph's table once for plan.yaml and a job once
// per node (job.Job.Transfers), which it passes to the node's
// communication and loop.
type Transfer struct {
	Var  string
	Kind TransferKind
	// Recv: this node receives it; else it sends it.
	Recv bool
	Peer ir.Node
	// DType is the payload's element type (ir.Rows for a row gradient).
	DType ir.DType
	// Shape is the payload's shape, its largest when AtMost (a table's
	// ids or rows, whose count varies from step to step); Bytes its size.
	Shape  ir.Shape
	Bytes  int
	AtMost bool
	// Count is an accumulate's pieces per step (the trainer count in sync
	// mode, 1 in async mode).
	Count int
	// Table is the table (or the pserver's shard of it) a table transfer
	// serves; Initial, a pserver's parameter it sends before step 0.
	Table   string
	Initial string
	// Tables are the tables of a bundle's transfer (Table is then
	// ops.TableBundle), in the order of their parts in every message.
	Tables []BundledTable
	// Op is the op of the node's graph that sends or receives it.
	Op *Op
}

// Transfers lists what the placed graph g sends and receives, at batch
// size batch: one entry per transfer and peer (a sharded table's per
// shard), in op order. types gives the variables' types (Infer at batch);
// nil infers them if a transfer's size needs them (a table's, or a
// variable sent that the graph does not declare).
func (g *Graph) Transfers(batch int, types map[string]ops.Type) ([]Transfer, error) {
	n := 0
	for _, op := range g.Ops {
		if isTransferOp(op.Type) {
			n++
		}
	}
	out := make([]Transfer, 0, n) // one each, but a sharded table's ops
	var inferErr error
	typeOf := func(name string) (ops.Type, bool) {
		if types == nil && inferErr == nil {
			types, inferErr = g.Infer(batch)
		}
		t, ok := types[name]
		return t, ok
	}
	for _, op := range g.Ops {
		if !isTransferOp(op.Type) {
			continue
		}
		var err error
		out, err = transfersOf(out, g, op, batch, typeOf)
		if inferErr != nil {
			return nil, inferErr
		}
		if err != nil {
			return nil, Errorf(op.Pos, "%s: %v", op.Type, err)
		}
	}
	return out, nil
}

// isTransferOp reports whether ops of type typ send or receive (the
// catalog's Transfer property).
func isTransferOp(typ string) bool {
	def, _ := ops.Lookup(typ)
	return def.Transfer
}

// transfersOf appends the transfers of one communication op to dst.
func transfersOf(dst []Transfer, g *Graph, op *Op, batch int, typeOf func(string) (ops.Type, bool)) ([]Transfer, error) {
	v := op.Attrs.String("var")
	shapeAttr := func() (ir.Shape, ir.DType, error) {
		s := ir.Shape(op.Attrs.Ints("shape")).Clone()
		for i, d := range s {
			if d == -1 {
				s[i] = batch
			}
		}
		dt, ok := ir.ParseDType(op.Attrs.String("dtype"))
		if !ok {
			dt = ir.F32
		}
		return s, dt, nil
	}
	peer := func(key string) (ir.Node, error) { return ir.ParseAttr(op.Attrs.String(key)) }
	switch op.Type {
	case "send":
		to, err := peer("to")
		if err != nil {
			return nil, err
		}
		kind := GradTransfer
		switch {
		case ops.IsClipPart(v):
			kind = ClipPartTransfer
		case ops.IsClipFactor(v):
			kind = ClipFactorTransfer
		case to.Role == ir.TrainerRole:
			kind = ParamTransfer
		}
		// The payload is the sent variable's: a parameter block or a
		// gradient, a declared variable or a scalar of the clip exchange.
		t := Transfer{Var: v, Kind: kind, Peer: to, DType: ir.F32, Initial: op.Attrs.String("initial"), Op: op}
		if d := g.Vars[op.Inputs[0]]; d != nil {
			t.DType, t.Shape = d.DType, d.Shape.Clone()
		} else if d := g.Vars[v]; d != nil && kind == ParamTransfer {
			// a pserver's updated parameter (block): the parameter's
			// type, which its assign keeps, without inferring the
			// whole graph's types (split lists every pserver's sends)
			t.DType, t.Shape = d.DType, d.Shape.Clone()
		} else if ty, ok := typeOf(op.Inputs[0]); ok {
			t.DType, t.Shape = ty.DType, ty.Shape.Clone()
		}
		t.Bytes = t.DType.Size() * t.Shape.Numel()
		return append(dst, t), nil
	case "recv", "accumulate":
		s, dt, _ := shapeAttr()
		t := Transfer{Var: v, Kind: ParamTransfer, Recv: true, DType: dt, Shape: s, Bytes: dt.Size() * s.Numel(), Op: op}
		if op.Type == "accumulate" {
			t.Kind, t.Peer, t.Count = GradTransfer, ir.Node{Role: ir.TrainerRole, Index: -1}, op.Attrs.Int("count")
			if ops.IsClipFactor(v) {
				t.Kind = ClipFactorTransfer
			}
			return append(dst, t), nil
		}
		from, err := peer("from")
		if err != nil {
			return nil, err
		}
		t.Peer = from
		switch {
		case ops.IsClipPart(v):
			t.Kind = ClipPartTransfer
		case ops.IsClipFactor(v):
			t.Kind = ClipFactorTransfer
		}
		return append(dst, t), nil
	case "fetch_rows", "send_rows":
		rows, d, dyn, err := tableRows(op, typeOf)
		if err != nil {
			return nil, err
		}
		m := op.Attrs.Int("shards")
		ids, grad := idsPayload(rows, d, dyn)
		out := dst
		for s := range m {
			p := ir.PServer(s)
			if op.Type == "send_rows" {
				out = append(out, Transfer{Var: v, Kind: TableGradTransfer, Peer: p, DType: ir.Rows, Shape: ir.Shape{rows, d}, Bytes: grad, AtMost: true, Table: v, Op: op})
				continue
			}
			out = append(out,
				Transfer{Var: ops.TableIDs(v), Kind: TableIDsTransfer, Peer: p, DType: ids.dt, Shape: ir.Shape{rows}, Bytes: ids.bytes, AtMost: true, Table: v, Op: op},
				Transfer{Var: ops.TableRows(v), Kind: TableRowsTransfer, Recv: true, Peer: p, DType: ir.F32, Shape: ir.Shape{rows, d}, Bytes: 4 * rows * d, AtMost: true, Table: v, Op: op})
		}
		return out, nil
	case "serve_rows":
		rows, d, dyn := op.Attrs.Int("max_rows"), 0, false
		if sv := g.Vars[op.Inputs[0]]; sv != nil && len(sv.Shape) == 2 {
			d, dyn = sv.Shape[1], sv.Shape[0] == ir.DynamicRows
		} else if ty, ok := typeOf(op.Inputs[0]); ok && len(ty.Shape) == 2 {
			d, dyn = ty.Shape[1], ty.Shape[0] == ir.DynamicRows
		}
		ids, _ := idsPayload(rows, d, dyn)
		every := ir.Node{Role: ir.TrainerRole, Index: -1}
		return append(dst,
			Transfer{Var: ops.TableIDs(v), Kind: TableIDsTransfer, Recv: true, Peer: every, DType: ids.dt, Shape: ir.Shape{rows}, Bytes: ids.bytes, AtMost: true, Count: op.Attrs.Int("count"), Table: op.Inputs[0], Op: op},
			Transfer{Var: ops.TableRows(v), Kind: TableRowsTransfer, Peer: every, DType: ir.F32, Shape: ir.Shape{rows, d}, Bytes: 4 * rows * d, AtMost: true, Table: op.Inputs[0], Op: op}), nil
	case "fetch_tables", "send_tables", "serve_tables", "accumulate_tables":
		bt, err := bundleTransfers(g, op, typeOf)
		return append(dst, bt...), err
	case "accumulate_rows":
		rows, shape := op.Attrs.Int("max_rows"), op.Attrs.Ints("shape")
		d := 0
		if len(shape) == 2 {
			d = shape[1]
		}
		_, grad := idsPayload(rows, d, len(shape) == 2 && shape[0] == ir.DynamicRows)
		return append(dst, Transfer{Var: v, Kind: TableGradTransfer, Recv: true, Peer: ir.Node{Role: ir.TrainerRole, Index: -1}, DType: ir.Rows,
			Shape: ir.Shape{rows, d}, Bytes: grad, AtMost: true, Count: op.Attrs.Int("count"), Table: v, Op: op}), nil
	}
	return dst, nil
}

// idsPayload is the size of a table's request (its dtype and bytes) and
// of its row gradient, for rows rows of width d: a fixed table's ids are
// int32 local rows, a row gradient's rows an int32 id and d floats each;
// a dynamic table's request is rows int64 keys then rows uint32 counts
// (dtype Rows: not one tensor), a row gradient's rows an int64 key and d
// floats each (docs/wire.md).
func idsPayload(rows, d int, dynamic bool) (ids struct {
	dt    ir.DType
	bytes int
}, grad int) {
	if dynamic {
		ids.dt, ids.bytes = ir.Rows, 12*rows
		return ids, rows * (8 + 4*d)
	}
	ids.dt, ids.bytes = ir.I32, 4*rows
	return ids, 4 * rows * (1 + d)
}

// tableRows is the most rows a trainer's table op moves per shard and
// step, the table's row width and whether it is dynamic: fetch_rows's
// output type, by its rule in the catalog, or send_rows's row gradient.
func tableRows(op *Op, typeOf func(string) (ops.Type, bool)) (rows, d int, dynamic bool, err error) {
	in := make([]ops.Type, len(op.Inputs))
	for i, name := range op.Inputs {
		t, ok := typeOf(name)
		if !ok {
			return 0, 0, false, fmt.Errorf("the type of %q is unknown", name)
		}
		in[i] = t
	}
	if op.Type == "send_rows" {
		if len(in) != 1 || len(in[0].Shape) != 2 {
			return 0, 0, false, fmt.Errorf("g must be a row gradient of a [V, D] table, got %v", in)
		}
		return in[0].MaxRows, in[0].Shape[1], in[0].Shape[0] == ir.DynamicRows, nil
	}
	def, _ := ops.Lookup(op.Type)
	outs, err := def.Infer(in, op.Attrs)
	if err != nil {
		return 0, 0, false, err
	}
	return outs[0].MaxRows, outs[0].Shape[1], outs[0].Shape[0] == ir.DynamicRows, nil
}

// HasTables reports whether the placed graph g moves a sharded table's
// rows (its transfer table has table transfers), without inferring types.
func HasTables(g *Graph) bool {
	for _, op := range g.Ops {
		switch op.Type {
		case "fetch_rows", "send_rows", "serve_rows", "accumulate_rows", "fetch_tables", "serve_tables":
			return true
		}
	}
	return false
}

// TableShards lists the sharded tables a pserver's graph serves (the
// shard variables), sorted.
func TableShards(g *Graph) []string {
	var out []string
	for _, op := range g.Ops {
		switch op.Type {
		case "serve_rows":
			out = append(out, op.Inputs[0])
		case "serve_tables":
			out = append(out, op.Inputs...)
		}
	}
	slices.Sort(out)
	return out
}

// Received lists the transfers of ts a node receives, one per name (a
// table's rows come from every shard under one name): what its endpoint
// accepts.
func Received(ts []Transfer) []Transfer {
	var out []Transfer
	seen := map[string]bool{}
	for _, t := range ts {
		if t.Recv && !seen[t.Var] {
			seen[t.Var] = true
			out = append(out, t)
		}
	}
	return out
}

// BundledTable is one table of a bundle's transfers: its name (the
// table's, on a pserver too), row width, and the most rows one message
// holds of it.
type BundledTable struct {
	Name           string
	Width, MaxRows int
}

// BundleTables lists the tables of a bundled table op (fetch_tables,
// send_tables, serve_tables, accumulate_tables), in message order.
func BundleTables(g *Graph, op *Op, typeOf func(string) (ops.Type, bool)) ([]BundledTable, error) {
	var out []BundledTable
	switch op.Type {
	case "fetch_tables", "send_tables":
		names := op.Outputs
		suffix := ops.FetchedSuffix
		if op.Type == "send_tables" {
			names, suffix = op.Inputs, ops.GradSuffix
		}
		for _, n := range names {
			t, ok := typeOf(n)
			if !ok || len(t.Shape) != 2 {
				return nil, fmt.Errorf("the type of %q is unknown", n)
			}
			out = append(out, BundledTable{Name: strings.TrimSuffix(n, suffix), Width: t.Shape[1], MaxRows: t.MaxRows})
		}
	case "serve_tables", "accumulate_tables":
		names, most := op.Inputs, op.Attrs.Ints("max_rows")
		if op.Type == "accumulate_tables" {
			names = op.Outputs
		}
		shapes := op.Attrs.Ints("shapes")
		for i, n := range names {
			n = strings.TrimSuffix(n, ops.GradSuffix)
			w := 0
			if v := g.Vars[n]; v != nil && len(v.Shape) == 2 {
				w = v.Shape[1]
				if v.Block != nil {
					n = v.Block.Of
				}
			} else if 2*i+1 < len(shapes) {
				w = shapes[2*i+1]
			}
			if i >= len(most) || w < 1 {
				return nil, fmt.Errorf("table %d of %v: no row width or max_rows", i, names)
			}
			out = append(out, BundledTable{Name: n, Width: w, MaxRows: most[i]})
		}
	}
	return out, nil
}

// BundleSizes is the most bytes of a bundle's request (every table's
// count, then their int32 ids), reply (their rows) and row gradient
// (every table's count, then each table's ids and values) per message.
func BundleSizes(ts []BundledTable) (ids, rows, grad int) {
	ids, grad = 4*len(ts), 4*len(ts)
	for _, t := range ts {
		ids += 4 * t.MaxRows
		rows += 4 * t.MaxRows * t.Width
		grad += 4 * t.MaxRows * (1 + t.Width)
	}
	return ids, rows, grad
}

// bundleTransfers is the transfers of a bundled table op.
func bundleTransfers(g *Graph, op *Op, typeOf func(string) (ops.Type, bool)) ([]Transfer, error) {
	tables, err := BundleTables(g, op, typeOf)
	if err != nil {
		return nil, err
	}
	v := op.Attrs.String("var")
	ids, rows, grad := BundleSizes(tables)
	idsT := Transfer{Var: ops.TableIDs(v), Kind: TableIDsTransfer, DType: ir.I32, Shape: ir.Shape{ids / 4}, Bytes: ids, AtMost: true, Table: v, Tables: tables, Op: op}
	rowsT := Transfer{Var: ops.TableRows(v), Kind: TableRowsTransfer, DType: ir.F32, Shape: ir.Shape{rows / 4}, Bytes: rows, AtMost: true, Table: v, Tables: tables, Op: op}
	gradT := Transfer{Var: v, Kind: TableGradTransfer, DType: ir.Rows, Shape: ir.Shape{grad / 4}, Bytes: grad, AtMost: true, Table: v, Tables: tables, Op: op}
	every := ir.Node{Role: ir.TrainerRole, Index: -1}
	switch op.Type {
	case "fetch_tables", "send_tables":
		m := op.Attrs.Int("shards")
		var out []Transfer
		for s := range m {
			p := ir.PServer(s)
			if op.Type == "send_tables" {
				gradT.Peer = p
				out = append(out, gradT)
				continue
			}
			idsT.Peer, rowsT.Peer, rowsT.Recv = p, p, true
			out = append(out, idsT, rowsT)
		}
		return out, nil
	case "serve_tables":
		idsT.Peer, idsT.Recv, idsT.Count, rowsT.Peer = every, true, op.Attrs.Int("count"), every
		return []Transfer{idsT, rowsT}, nil
	default: // accumulate_tables
		gradT.Peer, gradT.Recv, gradT.Count = every, true, op.Attrs.Int("count")
		return []Transfer{gradT}, nil
	}
}
