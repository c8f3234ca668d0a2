package partition

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"

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

// Files renders the plan directory in memory: plan.yaml and every
// subgraph, with data paths written relative to dir, as Write writes them.
func (p *Plan) Files(dir string) (map[string][]byte, error) {
	out := map[string][]byte{}
	var mu sync.Mutex
	err := p.render(dir, func(name string) (io.WriteCloser, error) {
		return &memFile{done: func(b []byte) {
			mu.Lock()
			out[name] = b
			mu.Unlock()
		}}, nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// memFile is a file of Files: its bytes are handed over on Close.
type memFile struct {
	bytes.Buffer
	done func([]byte)
}

func (f *memFile) Close() error {
	f.done(f.Bytes())
	return nil
}

// render writes the plan's files through create, which opens one for
// writing. The subgraphs are encoded on every core as a stream (a
// subgraph of a large model is hundreds of MB as YAML), each hashed as it
// is written, and plan.yaml's body beside them; its head lists the
// hashes, so it is written last.
func (p *Plan) render(dir string, create func(name string) (io.WriteCloser, error)) error {
	info := p.Info
	if info.Source != "" {
		info.Source = dsl.RelPath(dir, info.Source)
	}
	type file struct {
		name, role string
		g          *dsl.Graph
		sum        string
	}
	files := []*file{{name: TrainerFileName, role: "Trainer", g: p.Trainer}}
	for i, g := range p.PServers {
		files = append(files, &file{name: PServerFile(i), role: fmt.Sprintf("Pserver %d", i), g: g})
	}
	var body bytes.Buffer
	jobs := []func() error{func() error { // the longest file first
		return writeSubgraph(create, dir, info.Model, files[0].name, files[0].role, files[0].g, &files[0].sum)
	}, func() error {
		body.Grow(160 * (len(info.Params) + len(info.Placement) + len(info.Transfers))) // a line each
		info.writeBody(&body)
		return nil
	}}
	for _, f := range files[1:] {
		jobs = append(jobs, func() error { return writeSubgraph(create, dir, info.Model, f.name, f.role, f.g, &f.sum) })
	}
	errs := make([]error, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				errs[i] = jobs[i]()
			}
		}()
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	info.Files.SHA256 = map[string]string{}
	for _, f := range files {
		info.Files.SHA256[f.name] = f.sum
	}
	w, err := create(PlanFileName)
	if err != nil {
		return err
	}
	var head bytes.Buffer
	fmt.Fprintf(&head, "# Written by psgraph split from %s; read by psgraph run. Do not edit: split again.\n", info.Source)
	info.writeHead(&head)
	if _, err := w.Write(head.Bytes()); err != nil {
		w.Close()
		return err
	}
	if _, err := w.Write(body.Bytes()); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

// writeSubgraph writes subgraph g as file name of dir through create and
// stores the hash of its bytes in sum.
func writeSubgraph(create func(string) (io.WriteCloser, error), dir, model, name, role string, g *dsl.Graph, sum *string) error {
	w, err := create(name)
	if err != nil {
		return err
	}
	h := sha256.New()
	out := io.MultiWriter(w, h)
	c := *g
	c.File = filepath.Join(dir, name)
	_, err = fmt.Fprintf(out, "# %s subgraph of %s, written by psgraph split (see %s).\n", role, model, PlanFileName)
	if err == nil {
		err = dsl.Encode(out, &c)
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	*sum = hex.EncodeToString(h.Sum(nil))
	return err
}

// writeHead and writeBody render plan.yaml: block style for the
// sections, one flow-style line per block, pserver and transfer (yaml.v3's
// encoder is slow on plans of many thousand blocks, and this is easier to
// read). The head ends with the files' hashes.
func (in *PlanInfo) writeHead(b *bytes.Buffer) {
	q := dsl.YAMLString
	fmt.Fprintf(b, "psgraph-plan: %d\nmodel: %s\n", in.Version, q(in.Model))
	if in.Source != "" {
		fmt.Fprintf(b, "source: %s\n", q(in.Source))
	}
	if in.SourceSHA256 != "" {
		fmt.Fprintf(b, "source_sha256: %s\n", q(in.SourceSHA256))
	}
	fmt.Fprintf(b, "mode: %s\ntrainers: %d\nmin_block_size: %d\n", q(string(in.Mode)), in.Trainers, in.MinBlockSize)
	if len(in.Endpoints) > 0 {
		fmt.Fprintf(b, "endpoints: %s\n", flowStrings(in.Endpoints))
	}
	fmt.Fprintf(b, "files:\n  trainer: %s\n  pservers: %s\n  sha256:\n", q(in.Files.Trainer), flowStrings(in.Files.PServers))
	names := make([]string, 0, len(in.Files.SHA256))
	for n := range in.Files.SHA256 {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(b, "    %s: %s\n", q(n), q(in.Files.SHA256[n]))
	}
}

func (in *PlanInfo) writeBody(b *bytes.Buffer) {
	q := dsl.YAMLString
	b.WriteString("params:\n")
	for _, p := range in.Params {
		fmt.Fprintf(b, "  - name: %s\n    shape: %s\n    bytes: %d\n    node: %s\n", q(p.Name), flowInts(p.Shape), p.Bytes, q(p.Node))
		if len(p.Blocks) > 0 {
			b.WriteString("    blocks:\n")
			for _, bl := range p.Blocks {
				fmt.Fprintf(b, "      - {var: %s, rows: [%d, %d]%s, pserver: %d, bytes: %d}\n", q(bl.Var), bl.Rows[0], bl.Rows[1], strideField(bl.Stride), bl.PServer, bl.Bytes)
			}
		}
		if p.Whole != "" {
			fmt.Fprintf(b, "    whole: %s\n", q(p.Whole))
		}
	}
	b.WriteString("placement:\n")
	for _, pl := range in.Placement {
		fmt.Fprintf(b, "  - {param: %s, block: %s, rows: [%d, %d]%s, pserver: %d, bytes: %d}\n", q(pl.Param), q(pl.Block), pl.Rows[0], pl.Rows[1], strideField(pl.Stride), pl.PServer, pl.Bytes)
	}
	b.WriteString("pservers:\n")
	for _, l := range in.Load {
		b.WriteString("  - {index: " + strconv.Itoa(l.PServer))
		if l.Endpoint != "" {
			b.WriteString(", endpoint: " + q(l.Endpoint))
		}
		fmt.Fprintf(b, ", bytes: %d, blocks: %s}\n", l.Bytes, flowStrings(l.Blocks))
	}
	b.WriteString("transfers:\n")
	for _, t := range in.Transfers {
		atMost := ""
		if t.AtMost {
			atMost = ", at_most: true"
		}
		fmt.Fprintf(b, "  - {var: %s, from: %s, to: %s, shape: %s, dtype: %s%s}\n", q(t.Var), q(t.From), q(t.To), flowInts(t.Shape), q(t.DType), atMost)
	}
}

func strideField(n int) string {
	if n > 0 {
		return fmt.Sprintf(", stride: %d", n)
	}
	return ""
}

func flowStrings(s []string) string {
	parts := make([]string, len(s))
	for i, x := range s {
		parts[i] = dsl.YAMLString(x)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

func flowInts(s []int) string {
	parts := make([]string, len(s))
	for i, x := range s {
		parts[i] = strconv.Itoa(x)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// syncedFile is a plan file being written: Close flushes it to the disk
// first, so a crash after Write returned leaves the whole plan, never a
// renamed file whose bytes were still in the page cache.
type syncedFile struct{ *os.File }

func (f syncedFile) Close() error {
	err := f.File.Sync()
	if cerr := f.File.Close(); err == nil {
		err = cerr
	}
	return err
}

// Write creates dir and writes the plan's files into it, removing
// pserver files of an earlier plan with more pservers. Each file is
// written beside its final name and renamed into place once all are
// written, so a failed write leaves an earlier plan as it was. Files
// and directory are synced before Write returns.
func (p *Plan) Write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var mu sync.Mutex
	var temps []string
	tempName := func(name string) string { return filepath.Join(dir, "."+name+".tmp") }
	err := p.render(dir, func(name string) (io.WriteCloser, error) {
		f, err := os.OpenFile(tempName(name), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return nil, err
		}
		mu.Lock()
		temps = append(temps, name)
		mu.Unlock()
		return syncedFile{f}, nil
	})
	if err != nil {
		for _, n := range temps {
			os.Remove(tempName(n))
		}
		return err
	}
	keep := map[string]bool{}
	for _, n := range temps {
		keep[n] = true
	}
	stale, _ := filepath.Glob(filepath.Join(dir, "pserver-*.yaml"))
	for _, f := range stale {
		if !keep[filepath.Base(f)] {
			if err := os.Remove(f); err != nil {
				return err
			}
		}
	}
	sort.Strings(temps)
	for _, n := range temps {
		if err := os.Rename(tempName(n), filepath.Join(dir, n)); err != nil {
			return err
		}
	}
	if d, err := os.Open(dir); err == nil { // the renames themselves
		d.Sync()
		d.Close()
	}
	return nil
}

// WrittenBySplit reports whether file is a subgraph as split wrote it: the
// plan.yaml beside it lists it with its sha256.
func WrittenBySplit(file string) bool {
	src, err := os.ReadFile(filepath.Join(filepath.Dir(file), PlanFileName))
	if err != nil {
		return false
	}
	var info PlanInfo
	if yaml.Unmarshal(src, &info) != nil {
		return false
	}
	b, err := os.ReadFile(file)
	want, listed := info.Files.SHA256[filepath.Base(file)]
	return err == nil && listed && want == HashSource(b)
}

// ReadPlan loads a plan directory: plan.yaml and every subgraph it names,
// each loaded and checked like a model.
func ReadPlan(dir string) (*Plan, error) {
	path := filepath.Join(dir, PlanFileName)
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: cannot read the plan: %w (write it with psgraph split -o %s)", path, err, dir)
	}
	p := &Plan{}
	dec := yaml.NewDecoder(bytes.NewReader(src))
	dec.KnownFields(true)
	if err := dec.Decode(&p.Info); err != nil {
		return nil, fmt.Errorf("%s: %v", path, strings.TrimPrefix(err.Error(), "yaml: "))
	}
	if p.Info.Version != PlanVersion {
		return nil, fmt.Errorf("%s: psgraph-plan %d is not supported; this psgraph reads version %d (split the model again)", path, p.Info.Version, PlanVersion)
	}
	p.Info.PServers = len(p.Info.Load)
	if len(p.Info.Files.PServers) != p.Info.PServers {
		return nil, fmt.Errorf("%s: files.pservers lists %d files for %d pservers", path, len(p.Info.Files.PServers), p.Info.PServers)
	}
	load := func(name string) (*dsl.Graph, error) {
		if name == "" || filepath.IsAbs(name) || strings.Contains(name, "..") {
			return nil, fmt.Errorf("%s: file name %q must be a plain name inside the plan directory", path, name)
		}
		file := filepath.Join(dir, name)
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, dsl.Errorf(dsl.Pos{File: file}, "cannot read the subgraph: %v", err)
		}
		if want := p.Info.Files.SHA256[name]; want != HashSource(b) {
			return nil, fmt.Errorf("%s does not match the sha256 %s records for it: it was edited or comes from another split; split the model again", file, path)
		}
		return dsl.LoadBytes(file, b)
	}
	var errs []error
	if p.Trainer, err = load(p.Info.Files.Trainer); err != nil {
		errs = append(errs, err)
	}
	for _, f := range p.Info.Files.PServers {
		g, err := load(f)
		if err != nil {
			errs = append(errs, err)
		}
		p.PServers = append(p.PServers, g)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
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
