package partition

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/exec/program"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"

	"github.com/psgraph/psgraph/exec/tensor"
)

var paramLine = regexp.MustCompile(`^  [Wb][0-9]+:`)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/split")

// goldenCases are the directories of testdata/split and their options.
var goldenCases = []struct {
	name string
	opt  Options
}{
	{"digits-1x1", Options{Trainers: 1, PServers: 1}},
	{"digits-2x2-sync", Options{Trainers: 2, PServers: 2, Mode: Sync}},
	{"digits-2x2-async", Options{Trainers: 2, PServers: 2, Mode: Async, Endpoints: []string{"127.0.0.1:7001", "127.0.0.1:7002"}}},
	{"big-cut", Options{Trainers: 2, PServers: 3, MinBlockSize: 100000}},
	{"whole-nonelementwise", Options{Trainers: 2, PServers: 3, MinBlockSize: 100000}},
	{"tables-2x3", Options{Trainers: 2, PServers: 3}},
	{"bags-2x2", Options{Trainers: 2, PServers: 2}},
	{"dynamic-2x2", Options{Trainers: 2, PServers: 2}},
}

func loadModel(t testing.TB, path string) (*dsl.Graph, []byte) {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	g, err := dsl.LoadBytes(path, src)
	if err != nil {
		t.Fatal(err)
	}
	return g, src
}

func splitCase(t *testing.T, dir string, opt Options) (*Plan, map[string][]byte) {
	t.Helper()
	model := filepath.Join(dir, "model.yaml")
	g, src := loadModel(t, model)
	opt.Source, opt.SourceSHA256 = model, HashSource(src)
	p, err := Split(g, opt)
	if err != nil {
		t.Fatal(err)
	}
	files, err := p.Files(dir)
	if err != nil {
		t.Fatal(err)
	}
	return p, files
}

// TestGolden splits every case and compares the files byte for byte with
// the golden ones (go test ./partition -update rewrites them). It also
// checks the output is stable, that every file loads and checks, and that
// the subgraphs read back write the same bytes again.
func TestGolden(t *testing.T) {
	for _, c := range goldenCases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join("testdata", "split", c.name)
			p, files := splitCase(t, dir, c.opt)
			_, again := splitCase(t, dir, c.opt)
			for name, b := range files {
				if !bytes.Equal(b, again[name]) {
					t.Fatalf("%s differs between two runs", name)
				}
			}
			if *update {
				if err := p.Write(dir); err != nil {
					t.Fatal(err)
				}
			}
			for name, want := range files {
				got, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil {
					t.Fatalf("%v (run go test ./partition -update)", err)
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s differs from the golden file (run go test ./partition -update and review the diff):\n%s", name, firstDiff(string(got), string(want)))
				}
			}
			back, err := ReadPlan(dir)
			if err != nil {
				t.Fatalf("the written plan does not load: %v", err)
			}
			rewritten, err := back.Files(dir)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range append([]string{p.Info.Files.Trainer}, p.Info.Files.PServers...) {
				if got, want := rewritten[name], files[name]; !bytes.Equal(got, want) {
					t.Errorf("%s reads back differently: written again (now), it differs from the first write (golden):\n%s", name, firstDiff(string(want), string(got)))
				}
			}
			checkTransfers(t, back)
			checkBlocks(t, back)
			checkContract(t, back)
		})
	}
}

func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var a, b string
		if i < len(g) {
			a = g[i]
		}
		if i < len(w) {
			b = w[i]
		}
		if a != b {
			return fmt.Sprintf("line %d:\n  golden: %s\n  now:    %s", i+1, a, b)
		}
	}
	return ""
}

func nodeGraph(p *Plan, node string) *dsl.Graph {
	if node == trainerNode {
		return p.Trainer
	}
	var i int
	fmt.Sscanf(node, "pserver:%d", &i)
	return p.PServers[i]
}

// checkTransfers: every transfer of the plan is exactly one send on its
// source node and exactly one recv (or accumulate, for gradients) on its
// destination, and no other send/recv/accumulate exists.
func checkTransfers(t *testing.T, p *Plan) {
	t.Helper()
	type key struct{ typ, node, v string }
	seen := map[key]int{}
	nodes := []string{trainerNode}
	for i := range p.PServers {
		nodes = append(nodes, pserverNode(i))
	}
	for _, n := range nodes {
		for _, op := range nodeGraph(p, n).Ops {
			switch op.Type {
			case "send", "recv", "accumulate", "fetch_rows", "send_rows", "serve_rows", "accumulate_rows":
				seen[key{op.Type, n, op.Attrs.String("var")}]++
			case "fetch_tables", "send_tables", "serve_tables", "accumulate_tables": // a bundle: as the per-table ops
				seen[key{strings.Replace(op.Type, "_tables", "_rows", 1), n, op.Attrs.String("var")}]++
			}
		}
	}
	total := 0
	tables := map[string]bool{}
	for _, tr := range p.Info.Transfers {
		if tr.AtMost {
			// A lookup table: one fetch_rows and one send_rows per table on
			// the trainer, one serve_rows and accumulate_rows per shard.
			table, kind, _ := strings.Cut(tr.Var, "@")
			if rest, ok := strings.CutPrefix(tr.Var, ops.TableBundle+"@"); ok {
				table, kind = ops.TableBundle, rest
			}
			ps := tr.To
			if kind == "rows" {
				ps = tr.From
			}
			for _, want := range []key{{"fetch_rows", trainerNode, table}, {"send_rows", trainerNode, table + "@GRAD"},
				{"serve_rows", ps, table}, {"accumulate_rows", ps, table + "@GRAD"}} {
				if n := seen[want]; n != 1 {
					t.Errorf("transfer %s %s->%s: %d %s ops for %s on %s, want 1", tr.Var, tr.From, tr.To, n, want.typ, want.v, want.node)
				}
			}
			if !tables[table+ps] {
				tables[table+ps] = true
				total += 2 // serve_rows, accumulate_rows
			}
			if !tables[table] {
				tables[table] = true
				total += 2 // fetch_rows, send_rows
			}
			continue
		}
		recv := "recv"
		if strings.HasSuffix(tr.Var, "@GRAD") || strings.HasPrefix(tr.Var, "clip@factor.") {
			recv = "accumulate" // a gradient, or clip.norm's factor: one piece from each trainer
		}
		if n := seen[key{"send", tr.From, tr.Var}]; n != 1 {
			t.Errorf("transfer %s %s->%s: %d sends on %s, want 1", tr.Var, tr.From, tr.To, n, tr.From)
		}
		if n := seen[key{recv, tr.To, tr.Var}]; n != 1 {
			t.Errorf("transfer %s %s->%s: %d %s ops on %s, want 1", tr.Var, tr.From, tr.To, n, recv, tr.To)
		}
		total += 2
	}
	sum := 0
	for _, n := range seen {
		sum += n
	}
	if sum != total {
		t.Errorf("%d communication ops for %d transfers: some are not in the plan", sum, len(p.Info.Transfers))
	}
}

// checkBlocks: the blocks of every parameter cover its rows exactly once,
// on distinct pservers, and each pserver declares them with matching
// block keys.
func checkBlocks(t *testing.T, p *Plan) {
	t.Helper()
	for _, pi := range p.Info.Params {
		if pi.Node != "pserver" {
			continue
		}
		if pi.Dynamic() {
			// Shard j holds the keys dyntable.ShardOf places on pserver j.
			m := len(pi.Blocks)
			for j, b := range pi.Blocks {
				v := p.PServers[b.PServer].Vars[b.Var]
				if b.PServer != j || b.Stride != m || v == nil || v.Block != nil || !v.IsDynamic() || v.Dynamic.Shard == nil ||
					*v.Dynamic.Shard != (dsl.DynamicShard{Of: pi.Name, Index: j, Count: m}) {
					t.Errorf("%s: shard %d is %+v (declared %+v), want the keys of shard %d of %d on pserver:%d", pi.Name, j, b, v, j, m, j)
				}
			}
			continue
		}
		if pi.Table() {
			// Shard j holds rows j, j+M, ...: every row exactly once.
			m := len(pi.Blocks)
			for j, b := range pi.Blocks {
				v := p.PServers[b.PServer].Vars[b.Var]
				if b.PServer != j || b.Stride != m || b.Rows != [2]int{j, pi.Shape[0]} || v == nil || v.Block == nil ||
					v.Block.Step() != m || v.Block.Start != j || v.Shape[0] != v.Block.Rows() || v.Block.Rows() != (pi.Shape[0]-j+m-1)/m {
					t.Errorf("%s: shard %d is %+v (declared %+v), want rows %d, %d+%d, ... on pserver:%d", pi.Name, j, b, v, j, j, m, j)
				}
			}
			continue
		}
		next, used := 0, map[int]bool{}
		for _, b := range pi.Blocks {
			if b.Rows[0] != next || b.Rows[1] <= b.Rows[0] {
				t.Errorf("%s: block %s rows %v do not continue at row %d", pi.Name, b.Var, b.Rows, next)
			}
			next = b.Rows[1]
			if used[b.PServer] {
				t.Errorf("%s: two blocks on pserver:%d", pi.Name, b.PServer)
			}
			used[b.PServer] = true
			v := p.PServers[b.PServer].Vars[b.Var]
			if v == nil || v.Kind != dsl.KindParam {
				t.Fatalf("%s: pserver:%d does not declare param %s", pi.Name, b.PServer, b.Var)
			}
			if len(pi.Blocks) > 1 && (v.Block == nil || v.Block.Of != pi.Name || v.Block.Start != b.Rows[0] || v.Block.End != b.Rows[1]) {
				t.Errorf("%s: %s has block key %+v, want rows %v of %s", pi.Name, b.Var, v.Block, b.Rows, pi.Name)
			}
		}
		rows := 1
		if len(pi.Shape) > 0 {
			rows = pi.Shape[0]
		}
		if next != rows {
			t.Errorf("%s: blocks end at row %d of %d", pi.Name, next, rows)
		}
	}
}

// checkContract: the trainer holds no optimizer, receives each parameter
// block before the first op reading it, sends each gradient block right
// after the gradient is computed (only slice_rows and sends in between),
// and every pserver sends the updated value of each of its blocks.
func checkContract(t *testing.T, p *Plan) {
	t.Helper()
	at := map[string]int{}
	for i, op := range p.Trainer.Ops {
		if op.Section == dsl.Optimize {
			t.Errorf("trainer holds optimizer op %s %v", op.Type, op.Outputs)
		}
		for _, in := range op.Inputs {
			if j, ok := at[in]; !ok && p.Trainer.Vars[in] == nil {
				t.Errorf("trainer op %d %s reads %s before any op computes it", i, op.Type, in)
			} else if op.Type == "send" {
				for k := j + 1; k < i; k++ {
					if ty := p.Trainer.Ops[k].Type; ty != "slice_rows" && ty != "send" {
						t.Errorf("send of %s waits for op %d %s after its gradient is computed", in, k, ty)
					}
				}
			}
		}
		for _, o := range op.Outputs {
			at[o] = i
		}
	}
	for i, ps := range p.PServers {
		assigned := map[string]string{}
		for _, a := range ps.Assigns {
			assigned[a.Target] = a.Value
		}
		for _, op := range ps.Ops {
			if op.Type != "send" {
				continue
			}
			v := op.Attrs.String("var")
			if op.Inputs[0] != assigned[v] || op.Attrs.Int("step_offset") != 1 || op.Attrs.String("initial") != v || op.Attrs.String("reply_to") != v+"@GRAD" {
				t.Errorf("pserver:%d send of %s: input %s attrs %v, want the assigned value %s, step_offset 1, initial and reply_to", i, v, op.Inputs[0], op.Attrs, assigned[v])
			}
		}
	}
}

// TestBlockInitMatchesWholeParameter: a pserver initializing its block
// gets exactly those rows of the whole parameter.
func TestBlockInitMatchesWholeParameter(t *testing.T) {
	dir := filepath.Join("testdata", "split", "big-cut")
	g, _ := loadModel(t, filepath.Join(dir, "model.yaml"))
	p, err := Split(g, Options{Trainers: 2, PServers: 3, MinBlockSize: 100000})
	if err != nil {
		t.Fatal(err)
	}
	w := g.Vars["W1"]
	whole := tensor.New(tensor.F32, w.Shape)
	if err := program.Initialize(whole, w.Init, "W1", nil, 0, 1, nil); err != nil {
		t.Fatal(err)
	}
	cols := w.Shape[1]
	blocks := 0
	for _, ps := range p.PServers {
		for _, name := range ps.Order {
			v := ps.Vars[name]
			if v.Block == nil || v.Block.Of != "W1" {
				continue
			}
			blocks++
			bt := tensor.New(tensor.F32, v.Shape)
			seed, full, row, step := v.InitTarget()
			if err := program.Initialize(bt, v.Init, seed, full, row, step, nil); err != nil {
				t.Fatal(err)
			}
			want := whole.F[v.Block.Start*cols : v.Block.End*cols]
			for i := range want {
				if bt.F[i] != want[i] {
					t.Fatalf("%s element %d = %g, whole W1 has %g", name, i, bt.F[i], want[i])
				}
			}
		}
	}
	if blocks != 3 {
		t.Fatalf("W1 was cut into %d blocks, want 3", blocks)
	}
}

// shuffledDigits returns the digits model with its params and ops in a
// random order.
func shuffledDigits(t *testing.T, seed uint64) []byte {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("testdata", "split", "digits-1x1", "model.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(src), "\n")
	r := rand.New(rand.NewPCG(seed, 1))
	shuffle := func(match func(string) bool) {
		var idx []int
		for i, l := range lines {
			if match(l) {
				idx = append(idx, i)
			}
		}
		vals := make([]string, len(idx))
		for i, j := range idx {
			vals[i] = lines[j]
		}
		r.Shuffle(len(vals), func(i, j int) { vals[i], vals[j] = vals[j], vals[i] })
		for i, j := range idx {
			lines[j] = vals[i]
		}
	}
	shuffle(func(l string) bool { return strings.HasPrefix(l, "  - {type:") })
	shuffle(func(l string) bool { return paramLine.MatchString(l) })
	return []byte(strings.Join(lines, "\n"))
}

func TestPlacementIndependentOfDeclarationOrder(t *testing.T) {
	path := filepath.Join("testdata", "split", "digits-1x1", "model.yaml")
	opt := Options{Trainers: 2, PServers: 3}
	var want map[string][]byte
	for seed := range uint64(6) {
		src := shuffledDigits(t, seed)
		g, err := dsl.LoadBytes(path, src)
		if err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, src)
		}
		// Reverse the declaration order too (Params() follows it).
		if seed%2 == 1 {
			for i, j := 0, len(g.Order)-1; i < j; i, j = i+1, j-1 {
				g.Order[i], g.Order[j] = g.Order[j], g.Order[i]
			}
		}
		p, err := Split(g, opt)
		if err != nil {
			t.Fatal(err)
		}
		files, err := p.Files(filepath.Dir(path))
		if err != nil {
			t.Fatal(err)
		}
		if want == nil {
			want = files
			continue
		}
		for name, b := range want {
			if !bytes.Equal(b, files[name]) {
				t.Fatalf("seed %d: %s depends on declaration order:\n%s", seed, name, firstDiff(string(b), string(files[name])))
			}
		}
	}
}

// mixedModel is an MLP with layers of very different sizes.
func mixedModel(widths []int, opt string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "psgraph: 1\nname: mixed\ndata:\n  synthetic: {rows: 64, features: %d, classes: %d}\n  features: {name: x}\n  label: {name: y}\nparams:\n", widths[0], widths[len(widths)-1])
	for i := 0; i+1 < len(widths); i++ {
		fmt.Fprintf(&b, "  W%d: {shape: [%d, %d], init: {type: he_normal}}\n  b%d: {shape: [%d]}\n", i, widths[i], widths[i+1], i, widths[i+1])
	}
	b.WriteString("ops:\n")
	in := "x"
	for i := 0; i+1 < len(widths); i++ {
		fmt.Fprintf(&b, "  - {type: matmul, inputs: [%s, W%d], outputs: [m%d]}\n  - {type: add, inputs: [m%d, b%d], outputs: [a%d]}\n", in, i, i, i, i, i)
		in = fmt.Sprintf("a%d", i)
		if i+2 < len(widths) {
			fmt.Fprintf(&b, "  - {type: relu, inputs: [a%d], outputs: [r%d]}\n", i, i)
			in = fmt.Sprintf("r%d", i)
		}
	}
	fmt.Fprintf(&b, "  - {type: softmax_cross_entropy, inputs: [%s, y], outputs: [loss]}\ntrain:\n  loss: loss\n  batch: 8\n  optimizer: %s\n", in, opt)
	return []byte(b.String())
}

func TestBalanceOnMixedSizes(t *testing.T) {
	src := mixedModel([]int{64, 300, 200, 150, 100, 10}, "{type: momentum, lr: 0.1}")
	g, err := dsl.LoadBytes("mixed.yaml", src)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []int{2, 3, 4} {
		p, err := Split(g, Options{Trainers: 2, PServers: m, MinBlockSize: 10000})
		if err != nil {
			t.Fatal(err)
		}
		lo, hi := p.Info.Load[0].Bytes, p.Info.Load[0].Bytes
		for _, l := range p.Info.Load {
			lo, hi = min(lo, l.Bytes), max(hi, l.Bytes)
		}
		if lo == 0 || float64(hi) > 1.5*float64(lo) {
			t.Errorf("%d pservers: loads %v: most loaded %d B is more than 1.5x the least loaded %d B", m, p.Info.Load, hi, lo)
		}
		checkTransfers(t, p)
		checkBlocks(t, p)
	}
}

// TestCutSizes checks the block count rule min(ceil(numel/min), M, rows)
// and whole-row coverage over many shapes.
func TestCutSizes(t *testing.T) {
	for _, c := range []struct{ rows, cols, minBlock, m, want int }{
		{64, 4096, 100000, 3, 3},
		{64, 4096, 100000, 8, 3},
		{64, 4096, 200000, 8, 2},
		{64, 4096, 262144, 8, 1},
		{7, 100, 10, 16, 7},
		{1000, 1, 999, 4, 2},
		{5, 5, 1, 1, 1},
	} {
		src := mixedModel([]int{c.rows, c.cols}, "{type: sgd, lr: 0.1}")
		g, err := dsl.LoadBytes("cut.yaml", src)
		if err != nil {
			t.Fatal(err)
		}
		p, err := Split(g, Options{Trainers: 1, PServers: c.m, MinBlockSize: c.minBlock})
		if err != nil {
			t.Fatal(err)
		}
		var w ParamInfo
		for _, pi := range p.Info.Params {
			if pi.Name == "W0" {
				w = pi
			}
		}
		if len(w.Blocks) != c.want {
			t.Errorf("%dx%d min %d on %d pservers: %d blocks, want %d (%s)", c.rows, c.cols, c.minBlock, c.m, len(w.Blocks), c.want, w.Whole)
		}
		checkBlocks(t, p)
		checkTransfers(t, p)
		if _, err := dsl.LoadBytes("cut.yaml", mustMarshal(t, p.Trainer)); err != nil {
			t.Errorf("trainer does not check: %v", err)
		}
		for _, ps := range p.PServers {
			if _, err := dsl.LoadBytes("cut.yaml", mustMarshal(t, ps)); err != nil {
				t.Errorf("pserver does not check: %v", err)
			}
		}
	}
}

func mustMarshal(t *testing.T, g *dsl.Graph) []byte {
	t.Helper()
	b, err := dsl.Marshal(g)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestWholeReason(t *testing.T) {
	dir := filepath.Join("testdata", "split", "whole-nonelementwise")
	g, _ := loadModel(t, filepath.Join(dir, "model.yaml"))
	p, err := Split(g, Options{Trainers: 2, PServers: 3, MinBlockSize: 100000})
	if err != nil {
		t.Fatal(err)
	}
	for _, pi := range p.Info.Params {
		if pi.Name == "W1" {
			if len(pi.Blocks) != 1 || !strings.Contains(pi.Whole, "optimizer op mean") || !strings.Contains(pi.Whole, "is not element-wise") {
				t.Fatalf("W1: %d blocks, reason %q; want whole because of mean", len(pi.Blocks), pi.Whole)
			}
			return
		}
	}
	t.Fatal("W1 missing from the plan")
}

func TestPlaceOverrides(t *testing.T) {
	base, err := os.ReadFile(filepath.Join("testdata", "split", "digits-1x1", "model.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	edit := func(old, new string) []byte {
		if !bytes.Contains(base, []byte(old)) {
			t.Fatalf("model lacks %q", old)
		}
		return bytes.Replace(base, []byte(old), []byte(new), 1)
	}
	mpath := filepath.Join("testdata", "split", "digits-1x1", "m.yaml")
	w1 := "W1: {shape: [64, 128], init: {type: he_normal, seed: 1}"
	t.Run("param pinned to a pserver", func(t *testing.T) {
		g, err := dsl.LoadBytes(mpath, edit(w1, w1+", place: \"pserver:1\""))
		if err != nil {
			t.Fatal(err)
		}
		p, err := Split(g, Options{Trainers: 2, PServers: 2})
		if err != nil {
			t.Fatal(err)
		}
		if p.Info.Params[0].Name != "W1" || p.Info.Params[0].Blocks[0].PServer != 1 {
			t.Fatalf("W1 placed %+v, want pserver:1", p.Info.Params[0])
		}
		if p.PServers[1].Vars["W1"] == nil || p.PServers[1].Vars["W1"].Place != "" {
			t.Fatal("pserver:1 does not hold W1 (without a place key)")
		}
		checkTransfers(t, p)
	})
	t.Run("param on the trainer with one trainer", func(t *testing.T) {
		g, err := dsl.LoadBytes(mpath, edit(w1, w1+", place: trainer"))
		if err != nil {
			t.Fatal(err)
		}
		p, err := Split(g, Options{Trainers: 1, PServers: 2})
		if err != nil {
			t.Fatal(err)
		}
		tr := p.Trainer
		if tr.Vars["W1"] == nil || tr.Vars["W1"].Kind != dsl.KindParam {
			t.Fatal("trainer does not hold param W1")
		}
		for _, x := range p.Info.Transfers {
			if strings.HasPrefix(x.Var, "W1") {
				t.Errorf("transfer %s for a trainer-held parameter", x.Var)
			}
		}
		c := *tr
		c.File = mpath
		if _, err := dsl.LoadBytes(mpath, mustMarshal(t, &c)); err != nil {
			t.Fatal(err)
		}
	})
	for _, c := range []struct {
		name     string
		src      []byte
		opt      Options
		wantErrs []string
	}{
		{"forward op on a pserver", edit("{type: relu, inputs: [h1], outputs: [h]}", "{type: relu, inputs: [h1], outputs: [h], place: pserver}"),
			Options{Trainers: 2, PServers: 2}, []string{"testdata/split/digits-1x1/m.yaml:19:5: op relu (forward) has place: pserver", "remove place"}},
		{"pserver index out of range", edit(w1, w1+", place: \"pserver:5\""),
			Options{Trainers: 2, PServers: 2}, []string{"testdata/split/digits-1x1/m.yaml:12:3: param W1 has place: pserver:5 but the job has 2 pservers", "--pservers 6"}},
		{"param on the trainer with two trainers", edit(w1, w1+", place: trainer"),
			Options{Trainers: 2, PServers: 2}, []string{"testdata/split/digits-1x1/m.yaml:12:3: param W1 has place: trainer", "drift apart"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			g, err := dsl.LoadBytes(mpath, c.src)
			if err != nil {
				t.Fatal(err)
			}
			_, err = Split(g, c.opt)
			if err == nil {
				t.Fatal("Split accepted an impossible placement")
			}
			for _, w := range c.wantErrs {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	g, _ := loadModel(t, filepath.Join("testdata", "split", "digits-1x1", "model.yaml"))
	for _, c := range []struct {
		opt  Options
		want string
	}{
		{Options{Trainers: 0, PServers: 1}, "trainers must be at least 1"},
		{Options{Trainers: 1, PServers: 0}, "pservers must be at least 1"},
		{Options{Trainers: 1, PServers: 1, Mode: "eventual"}, `mode "eventual" is not sync or async`},
		{Options{Trainers: 1, PServers: 2, Endpoints: []string{"a:1"}}, "1 pserver endpoints given for 2 pservers"},
	} {
		if _, err := Split(g, c.opt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want %q", c.opt, err, c.want)
		}
	}
	noTrain, err := dsl.LoadBytes("n.yaml", []byte("psgraph: 1\nparams:\n  W: {shape: [2]}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Split(noTrain, Options{Trainers: 1, PServers: 1}); err == nil || !strings.Contains(err.Error(), "n.yaml: the model has no train section") {
		t.Errorf("no train section: got %v", err)
	}
	noOpt, err := dsl.LoadBytes("o.yaml", []byte("psgraph: 1\ndata: {synthetic: {rows: 4, features: 2, classes: 2}, features: {name: x}}\nops:\n  - {type: mean, inputs: [x], outputs: [m]}\ntrain: {loss: m, batch: 2}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Split(noOpt, Options{Trainers: 1, PServers: 1}); err == nil || !strings.Contains(err.Error(), "o.yaml:5:8: the model has no optimizer ops") {
		t.Errorf("no optimizer: got %v", err)
	}
	p, err := Split(g, Options{Trainers: 1, PServers: 6})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Warnings) != 1 || !strings.Contains(p.Warnings[0], "pserver:4, pserver:5 hold nothing") {
		t.Errorf("warnings %q, want pserver:4 and pserver:5 idle", p.Warnings)
	}
	for i, ps := range p.PServers {
		if _, err := dsl.LoadBytes(fmt.Sprintf("ps%d.yaml", i), mustMarshal(t, ps)); err != nil {
			t.Errorf("pserver %d does not check: %v", i, err)
		}
	}
}

func TestSummary(t *testing.T) {
	p, _ := splitCase(t, filepath.Join("testdata", "split", "big-cut"), Options{Trainers: 2, PServers: 3, MinBlockSize: 100000})
	s := p.Summary()
	for _, want := range []string{
		"split big-cut: 2 trainers (sync), 3 pservers",
		"W1           [64, 4096]      1.0 MiB  cut into 3 blocks: W1.b0 rows [0, 22) -> pserver:",
		"send/recv pairs: 12 ",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
	var names []string
	for _, tr := range p.Info.Transfers {
		names = append(names, tr.Var)
	}
	if !sort.StringsAreSorted(names) {
		t.Errorf("transfers not sorted: %v", names)
	}
}

// TestStitchingBack joins the subgraphs of every golden case again (send
// and recv pairs become edges, accumulate over the trainers becomes the
// gradient itself, slice_rows/concat pairs cancel, block names map back to
// the parameter) and checks the result has exactly the ops of the source
// graph.
func TestStitchingBack(t *testing.T) {
	for _, c := range goldenCases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join("testdata", "split", c.name)
			src, _ := loadModel(t, filepath.Join(dir, "model.yaml"))
			p, _ := splitCase(t, dir, c.opt)
			want := map[string]int{}
			for _, op := range src.Ops {
				want[opSignature(op, nil)]++
			}
			got := map[string]int{}
			for _, op := range p.Trainer.Ops {
				switch {
				case op.Type == "recv" || op.Type == "send" || op.Type == "fetch_rows" || op.Type == "send_rows" || op.Type == "dyn_pos" ||
					op.Type == "fetch_tables" || op.Type == "send_tables":
					continue
				case op.Type == "slice_rows" && p.isBlockGrad(op.Outputs[0]): // a gradient block
					continue
				}
				op := *op
				op.Inputs = mapNames(op.Inputs, func(x string) string {
					if _, ids, ok := strings.Cut(x, "@pos."); ok { // a dynamic table's positions: its keys
						return ids
					}
					return strings.TrimSuffix(x, "@fetched")
				})
				switch op.Type {
				case "concat":
					if _, isParam := src.Vars[op.Outputs[0]]; isParam {
						continue
					}
				}
				got[opSignature(&op, nil)]++
			}
			blockOf := map[string]string{}
			for _, pi := range p.Info.Params {
				for _, b := range pi.Blocks {
					blockOf[b.Var] = pi.Name
				}
			}
			// Every block runs the whole parameter's optimizer on its rows:
			// count the ops of block 0 (or the whole parameter) once.
			for _, ps := range p.PServers {
				for _, op := range ps.Ops {
					if op.Type == "accumulate" || op.Type == "send" || op.Type == "serve_rows" || op.Type == "accumulate_rows" ||
						op.Type == "serve_tables" || op.Type == "accumulate_tables" {
						continue
					}
					param := blockOf[op.Param]
					if op.Param != param && !strings.HasSuffix(op.Param, ".b0") && !strings.HasSuffix(op.Param, ".s0") {
						continue
					}
					got[opSignature(op, func(x string) string { return rename(op.Param, param, x) })]++
				}
			}
			for sig, n := range want {
				if got[sig] != n {
					t.Errorf("source op %s appears %d times after stitching, want %d", sig, got[sig], n)
				}
			}
			for sig, n := range got {
				if want[sig] == 0 {
					t.Errorf("stitched graph has op %s (x%d) that the source lacks", sig, n)
				}
			}
			// Each accumulate counts the pieces of all trainers (sync) or one (async).
			wantCount := c.opt.Trainers
			if c.opt.Mode == Async {
				wantCount = 1
			}
			for _, ps := range p.PServers {
				for _, op := range ps.Ops {
					if op.Type == "accumulate" && op.Attrs.Int("count") != wantCount {
						t.Errorf("accumulate %s count %d, want %d", op.Attrs.String("var"), op.Attrs.Int("count"), wantCount)
					}
				}
			}
		})
	}
}

func opSignature(op *dsl.Op, ren func(string) string) string {
	if ren == nil {
		ren = func(x string) string { return x }
	}
	param := op.Param
	if param != "" {
		param = ren(param)
	}
	return fmt.Sprintf("%s%v->%v %v %s %s", op.Type, mapNames(op.Inputs, ren), mapNames(op.Outputs, ren), op.Attrs, op.Section, param)
}

// A subgraph edited after split, or copied in from another split, is refused.
func TestReadPlanRefusesEditedFiles(t *testing.T) {
	g, err := dsl.Load("../examples/digits-mlp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Split(g, Options{Trainers: 2, PServers: 2})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := p.Write(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPlan(dir); err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(dir, TrainerFileName)
	b, _ := os.ReadFile(f)
	os.WriteFile(f, append(b, []byte("# edited\n")...), 0o644)
	if _, err := ReadPlan(dir); err == nil || !strings.Contains(err.Error(), "edited or comes from another split") {
		t.Fatalf("want a refusal naming the edit, got %v", err)
	}
}

// isBlockGrad reports whether name is the gradient of a parameter block.
func (p *Plan) isBlockGrad(name string) bool {
	for _, pi := range p.Info.Params {
		for _, b := range pi.Blocks {
			if len(pi.Blocks) > 1 && name == dsl.GradName(b.Var) {
				return true
			}
		}
	}
	return false
}

func mapNames(in []string, f func(string) string) []string {
	if in == nil {
		return nil
	}
	out := make([]string, len(in))
	for i, x := range in {
		out[i] = f(x)
	}
	return out
}

// Write writes exactly the files Files renders (which the golden files
// check), removes pserver files of an earlier plan with more pservers, and
// a write that fails leaves the earlier plan as it was.
func TestWriteMatchesFiles(t *testing.T) {
	g, err := dsl.Load("../examples/digits-mlp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	split := func(pservers int) (*Plan, map[string][]byte) {
		p, err := Split(g, Options{Trainers: 2, PServers: pservers})
		if err != nil {
			t.Fatal(err)
		}
		files, err := p.Files(dir)
		if err != nil {
			t.Fatal(err)
		}
		return p, files
	}
	written := func() map[string][]byte {
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]byte{}
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				t.Fatal(err)
			}
			out[e.Name()] = b
		}
		return out
	}
	same := func(got, want map[string][]byte) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("the directory holds %d files, want %d: %v", len(got), len(want), slices.Sorted(maps.Keys(got)))
		}
		for name, b := range want {
			if !bytes.Equal(got[name], b) {
				t.Fatalf("%s differs from Files:\n%s", name, firstDiff(string(got[name]), string(b)))
			}
		}
	}
	p3, files3 := split(3)
	if err := p3.Write(dir); err != nil {
		t.Fatal(err)
	}
	same(written(), files3)
	p2, files2 := split(2)
	if err := p2.Write(dir); err != nil {
		t.Fatal(err)
	}
	same(written(), files2) // pserver-2.yaml is gone

	// A directory where a file's temporary copy goes makes the write fail.
	block := filepath.Join(dir, ".pserver-0.yaml.tmp")
	if err := os.Mkdir(block, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := p3.Write(dir); err == nil {
		t.Fatal("Write succeeded although it could not create a file")
	}
	os.Remove(block)
	same(written(), files2)
}

// plan.yaml lists the transfers by name, a name's pservers in order, and
// holds exactly the transfers of every pserver's table: with few pservers
// (their sorted lists merged) and with more than 16 (one stable sort).
func TestPlanTransfersSortedByNameAndPServer(t *testing.T) {
	for _, m := range []int{3, 20} {
		g := deepMLP(t, 40)
		p, err := Split(g, Options{Trainers: 2, PServers: m, MinBlockSize: 16})
		if err != nil {
			t.Fatal(err)
		}
		checkTransfers(t, p)
		want := map[string]int{}
		for j, pg := range p.PServers {
			ts, err := pg.Transfers(g.Batch(), nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, tr := range ts {
				want[fmt.Sprintf("%s@%d", tr.Var, j)]++
			}
		}
		got, total := p.Info.Transfers, 0
		for _, n := range want {
			total += n
		}
		if len(got) != total {
			t.Fatalf("%d pservers: %d transfers in the plan, the pservers' tables hold %d", m, len(got), total)
		}
		for i, tr := range got {
			j := pserverOf(tr)
			if want[fmt.Sprintf("%s@%d", tr.Var, j)]--; want[fmt.Sprintf("%s@%d", tr.Var, j)] < 0 {
				t.Fatalf("%d pservers: %s of pserver %d listed once too often", m, tr.Var, j)
			}
			if i > 0 {
				prev := got[i-1]
				if prev.Var > tr.Var || prev.Var == tr.Var && pserverOf(prev) > j {
					t.Fatalf("%d pservers: %s (pserver %d) after %s (pserver %d)", m, tr.Var, j, prev.Var, pserverOf(prev))
				}
			}
		}
	}
}

// pserverOf is the pserver end of a transfer of the plan.
func pserverOf(tr TransferInfo) int {
	node := tr.From
	if node == trainerNode {
		node = tr.To
	}
	n, err := ir.ParseAttr(node)
	if err != nil {
		panic(err)
	}
	return n.Index
}
