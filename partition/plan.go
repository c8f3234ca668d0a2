package partition

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ir"
)

// PlanVersion is the plan.yaml format version.
const PlanVersion = 1

// File names inside a plan directory.
const (
	PlanFileName    = "plan.yaml"
	TrainerFileName = "trainer.yaml"
)

// PServerFile is the file name of pserver i's subgraph.
func PServerFile(i int) string { return fmt.Sprintf("pserver-%d.yaml", i) }

// Plan is the result of Split: the placed subgraphs and their description.
type Plan struct {
	Info     PlanInfo
	Trainer  *dsl.Graph
	PServers []*dsl.Graph
	// Warnings are facts worth telling the user, e.g. idle pservers.
	Warnings []string
}

// PlanInfo is the content of plan.yaml.
type PlanInfo struct {
	Version      int         `yaml:"psgraph-plan"`
	Model        string      `yaml:"model"`
	Source       string      `yaml:"source,omitempty"`
	SourceSHA256 string      `yaml:"source_sha256,omitempty"`
	Mode         Mode        `yaml:"mode"`
	Trainers     int         `yaml:"trainers"`
	PServers     int         `yaml:"-"` // len(Load)
	MinBlockSize int         `yaml:"min_block_size"`
	Endpoints    []string    `yaml:"endpoints,omitempty,flow"`
	Files        PlanFiles   `yaml:"files"`
	Params       []ParamInfo `yaml:"params"`
	// Placement has one entry per parameter block on a pserver.
	Placement []Placement    `yaml:"placement"`
	Load      []PServerLoad  `yaml:"pservers"`
	Transfers []TransferInfo `yaml:"transfers"`
}

// PlanFiles names the subgraph files, relative to the plan directory, and
// the sha256 of each, so a file edited or mixed in from another split is
// refused.
type PlanFiles struct {
	Trainer  string            `yaml:"trainer"`
	PServers []string          `yaml:"pservers,flow"`
	SHA256   map[string]string `yaml:"sha256"`
}

// Placement is where one parameter block went: rows [Rows[0], Rows[1]) of
// Param, held as Block on PServer.
type Placement struct {
	Param   string `yaml:"param"`
	Block   string `yaml:"block"`
	Rows    [2]int `yaml:"rows,flow"`
	Stride  int    `yaml:"stride,omitempty"`
	PServer int    `yaml:"pserver"`
	Bytes   int    `yaml:"bytes"`
}

// ParamInfo tells where one parameter went.
type ParamInfo struct {
	Name  string `yaml:"name"`
	Shape []int  `yaml:"shape,flow"`
	Bytes int    `yaml:"bytes"`
	// Node is "pserver" or "trainer" (not trained, or place: trainer).
	Node   string      `yaml:"node"`
	Blocks []BlockInfo `yaml:"blocks,omitempty"`
	// Whole says why the parameter was not cut into row blocks.
	Whole string `yaml:"whole,omitempty"`
}

// Table reports whether the parameter is a lookup table sharded across
// the pservers (fetched by id, never sent whole to a trainer).
func (pi *ParamInfo) Table() bool { return len(pi.Blocks) > 0 && pi.Blocks[0].Stride > 0 }

// Dynamic reports whether the parameter is a dynamic table (sharded by
// key over the pservers, each shard a dyntable.Table).
func (pi *ParamInfo) Dynamic() bool { return len(pi.Shape) > 0 && pi.Shape[0] == ir.DynamicRows }

// ServedParams lists the parameters that pservers send the trainers whole
// (every parameter on a pserver but the lookup tables), in plan order.
func (in *PlanInfo) ServedParams() []string {
	var out []string
	for i := range in.Params {
		if pi := &in.Params[i]; pi.Node == "pserver" && !pi.Table() {
			out = append(out, pi.Name)
		}
	}
	return out
}

// HasFixedTables reports whether the plan shards a lookup table of fixed
// rows (whose shards a pserver's --save writes), not only dynamic ones.
func (in *PlanInfo) HasFixedTables() bool {
	for i := range in.Params {
		if in.Params[i].Table() && !in.Params[i].Dynamic() {
			return true
		}
	}
	return false
}

// HasTables reports whether the plan shards a lookup table.
func (in *PlanInfo) HasTables() bool {
	for i := range in.Params {
		if in.Params[i].Table() {
			return true
		}
	}
	return false
}

// BlockInfo is one row block [Rows[0], Rows[1]) of a parameter on a
// pserver; a lookup table's shard has Stride M (every M-th of those rows).
type BlockInfo struct {
	Var     string `yaml:"var"`
	Rows    [2]int `yaml:"rows,flow"`
	Stride  int    `yaml:"stride,omitempty"`
	PServer int    `yaml:"pserver"`
	Bytes   int    `yaml:"bytes"`
}

// PServerLoad is what one pserver holds.
type PServerLoad struct {
	PServer  int      `yaml:"index"`
	Endpoint string   `yaml:"endpoint,omitempty"`
	Bytes    int      `yaml:"bytes"`
	Blocks   []string `yaml:"blocks,flow"`
}

// TransferInfo is one send/recv pair. AtMost: Shape is the largest
// (a lookup table's ids, rows or row gradient, as many as a batch has).
type TransferInfo struct {
	Var    string `yaml:"var"`
	From   string `yaml:"from"`
	To     string `yaml:"to"`
	Shape  []int  `yaml:"shape,flow"`
	DType  string `yaml:"dtype"`
	AtMost bool   `yaml:"at_most,omitempty"`
}

// planTransfers lists every transfer of the job once, from its pserver's
// end (each pserver's transfer table, dsl.Graph.Transfers), ordered by
// name, a table's shards by pserver, and transfers of one name and
// pserver in their table's order.
func planTransfers(pservers []*dsl.Graph, batch int) []TransferInfo {
	each := make([][]TransferInfo, len(pservers))
	n := 0
	for j, g := range pservers {
		ts, err := g.Transfers(batch, nil)
		if err != nil {
			panic(fmt.Sprintf("partition: the transfers of pserver %d's subgraph: %v", j, err)) // Split built it: a bug
		}
		node := pserverNode(j) // the pserver's end: its peer is every trainer
		list := make([]TransferInfo, len(ts))
		for i, t := range ts {
			dt := dtypeAttr(t.DType)
			if t.DType == ir.Rows {
				dt = "rows"
			}
			list[i] = TransferInfo{Var: t.Var, From: node, To: trainerNode, Shape: t.Shape.Clone(), DType: dt, AtMost: t.AtMost}
			if t.Recv {
				list[i].From, list[i].To = trainerNode, node
			}
		}
		sortByVar(list)
		each[j], n = list, n+len(list)
	}
	out := make([]TransferInfo, 0, n)
	if len(each) > 16 { // many lists: concatenated in pserver order, sorted stably
		for _, list := range each {
			out = append(out, list...)
		}
		slices.SortStableFunc(out, func(a, b TransferInfo) int { return strings.Compare(a.Var, b.Var) })
		return out
	}
	// Merge the pservers' sorted lists: the smallest name first, a tie to
	// the lower pserver.
	next := make([]int, len(each))
	for len(out) < n {
		best := -1
		for j, list := range each {
			if next[j] < len(list) && (best < 0 || list[next[j]].Var < each[best][next[best]].Var) {
				best = j
			}
		}
		out = append(out, each[best][next[best]])
		next[best]++
	}
	return out
}

// sortByVar sorts a pserver's transfers by name, keeping the order of
// equal names. They come nearly sorted (op order: each parameter's
// gradient accumulate just before its send), so an insertion sort moves
// little; one that would move a lot gives way to a stable sort.
func sortByVar(list []TransferInfo) {
	moves := 0
	for i := 1; i < len(list); i++ {
		j := i
		for ; j > 0 && list[j].Var < list[j-1].Var; j-- {
			list[j], list[j-1] = list[j-1], list[j]
		}
		if moves += i - j; moves > 4*len(list) {
			slices.SortStableFunc(list, func(a, b TransferInfo) int { return strings.Compare(a.Var, b.Var) })
			return
		}
	}
}

// HashSource returns the content hash recorded as source_sha256.
func HashSource(src []byte) string {
	h := sha256.Sum256(src)
	return hex.EncodeToString(h[:])
}

// describe fills p.Info and p.Warnings.
func (s *splitter) describe(p *Plan, blocks []*block) {
	opt := s.opt
	info := PlanInfo{Version: PlanVersion, Model: s.g.Name, Source: opt.Source, SourceSHA256: opt.SourceSHA256,
		Mode: opt.Mode, Trainers: opt.Trainers, PServers: opt.PServers, MinBlockSize: opt.MinBlockSize,
		Endpoints: opt.Endpoints, Files: PlanFiles{Trainer: TrainerFileName}}
	for i := range opt.PServers {
		info.Files.PServers = append(info.Files.PServers, PServerFile(i))
		l := PServerLoad{PServer: i, Blocks: []string{}}
		if len(opt.Endpoints) > 0 {
			l.Endpoint = opt.Endpoints[i]
		}
		info.Load = append(info.Load, l)
	}
	params := s.g.Params()
	sort.Strings(params)
	for _, n := range params {
		v := s.g.Vars[n]
		pi := ParamInfo{Name: n, Shape: v.Shape.Clone(), Bytes: v.Shape.Numel() * v.DType.Size(), Node: trainerNode}
		if v.IsDynamic() {
			pi.Bytes = 0 // its rows come and go with the keys
		}
		gr := s.groups[n]
		switch {
		case gr == nil:
			pi.Whole = "not trained (no optimizer updates it): kept on the trainer"
		case gr.pin == trainerNode:
			pi.Whole = gr.whole
		default:
			pi.Node = "pserver"
			pi.Whole = gr.whole
			for _, b := range gr.blocks {
				pi.Blocks = append(pi.Blocks, BlockInfo{Var: b.name, Rows: [2]int{b.start, b.end}, Stride: b.stride, PServer: b.pserver, Bytes: b.bytes})
				info.Placement = append(info.Placement, Placement{Param: n, Block: b.name, Rows: [2]int{b.start, b.end}, Stride: b.stride, PServer: b.pserver, Bytes: b.bytes})
			}
		}
		info.Params = append(info.Params, pi)
	}
	for _, b := range blocks {
		l := &info.Load[b.pserver]
		l.Bytes += b.bytes
		l.Blocks = append(l.Blocks, b.name)
	}
	info.Transfers = planTransfers(p.PServers, s.g.Batch())

	var idle []string
	for _, l := range info.Load {
		if len(l.Blocks) == 0 {
			idle = append(idle, pserverNode(l.PServer))
		}
	}
	if len(idle) > 0 {
		p.Warnings = append(p.Warnings, fmt.Sprintf("%d pservers for %d parameter blocks: %s hold nothing (their subgraphs are empty); use fewer pservers or a smaller --min-block-size", opt.PServers, len(blocks), strings.Join(idle, ", ")))
	}
	p.Info = info
}

// maxSummaryParams bounds the parameter lines of Summary: plan.yaml has all.
const maxSummaryParams = 40

// Summary is a short human description of the plan.
func (p *Plan) Summary() string {
	var b strings.Builder
	in := p.Info
	fmt.Fprintf(&b, "split %s: %d trainers (%s), %d pservers, min block size %d elements\n", in.Model, in.Trainers, in.Mode, in.PServers, in.MinBlockSize)
	for i, pi := range in.Params {
		if i == maxSummaryParams && len(in.Params) > maxSummaryParams+1 {
			fmt.Fprintf(&b, "  ... and %d more parameters (see %s)\n", len(in.Params)-i, PlanFileName)
			break
		}
		fmt.Fprintf(&b, "  %-12s %-12s %10s  ", pi.Name, ir.Shape(pi.Shape).String(), ByteSize(pi.Bytes))
		switch {
		case pi.Node == trainerNode:
			fmt.Fprintf(&b, "-> trainer (%s)\n", pi.Whole)
		case len(pi.Blocks) > 0 && pi.Blocks[0].Stride > 0:
			fmt.Fprintf(&b, "-> sharded over %d pservers (%s)\n", len(pi.Blocks), pi.Whole)
		case len(pi.Blocks) == 1:
			fmt.Fprintf(&b, "-> pserver:%d (whole: %s)\n", pi.Blocks[0].PServer, pi.Whole)
		default:
			parts := make([]string, len(pi.Blocks))
			for i, bl := range pi.Blocks {
				parts[i] = fmt.Sprintf("%s rows [%d, %d) -> pserver:%d", bl.Var, bl.Rows[0], bl.Rows[1], bl.PServer)
			}
			fmt.Fprintf(&b, "cut into %d blocks: %s\n", len(pi.Blocks), strings.Join(parts, ", "))
		}
	}
	for _, l := range in.Load {
		ep := ""
		if l.Endpoint != "" {
			ep = " (" + l.Endpoint + ")"
		}
		fmt.Fprintf(&b, "pserver:%d%s: %s in %d blocks\n", l.PServer, ep, ByteSize(l.Bytes), len(l.Blocks))
	}
	dense, clip := 0, 0
	for _, t := range in.Transfers {
		switch {
		case strings.HasPrefix(t.Var, "clip@"):
			clip++
		case !t.AtMost:
			dense++
		}
	}
	fmt.Fprintf(&b, "send/recv pairs: %d (%d parameter blocks to the trainers, %d gradient blocks to the pservers", len(in.Transfers), dense/2, dense/2)
	if rows := len(in.Transfers) - dense - clip; rows > 0 {
		fmt.Fprintf(&b, "; %d for lookup tables: ids up, rows down, row gradients up", rows)
		if n := bundledTables(p.Trainer); n > 0 {
			fmt.Fprintf(&b, ", those of %d tables bundled, one message per pserver and direction", n)
		}
	}
	if clip > 0 {
		fmt.Fprintf(&b, "; %d for clip.norm: each pserver's sum of squares to the trainers, the factor back", clip)
	}
	b.WriteString(")\n")
	for _, w := range p.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", w)
	}
	return b.String()
}

// bundledTables is how many tables the trainer's graph t fetches in its
// bundle (fetch_tables), 0 without one.
func bundledTables(t *dsl.Graph) int {
	if t == nil {
		return 0
	}
	for _, op := range t.Ops {
		if op.Type == "fetch_tables" {
			return len(op.Outputs)
		}
	}
	return 0
}

// ByteSize formats a byte count for people: 32.0 KiB, 1.5 GiB.
func ByteSize(n int) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
