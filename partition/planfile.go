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
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/psgraph/psgraph/dsl"
	"gopkg.in/yaml.v3"
)

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
	q, ints := dsl.WriteYAMLString, dsl.WriteIntList
	num := func(n int) { b.Write(strconv.AppendInt(b.AvailableBuffer(), int64(n), 10)) }
	// rows writes `, rows: [start, end]`, the stride when set, the pserver
	// and the bytes of a block or placement line, and closes it.
	rows := func(r [2]int, stride, pserver, bytes int) {
		b.WriteString(", rows: [")
		num(r[0])
		b.WriteString(", ")
		num(r[1])
		b.WriteByte(']')
		if stride > 0 {
			b.WriteString(", stride: ")
			num(stride)
		}
		b.WriteString(", pserver: ")
		num(pserver)
		b.WriteString(", bytes: ")
		num(bytes)
		b.WriteString("}\n")
	}
	b.WriteString("params:\n")
	for _, p := range in.Params {
		b.WriteString("  - name: ")
		q(b, p.Name)
		b.WriteString("\n    shape: ")
		ints(b, p.Shape)
		b.WriteString("\n    bytes: ")
		num(p.Bytes)
		b.WriteString("\n    node: ")
		q(b, p.Node)
		b.WriteByte('\n')
		if len(p.Blocks) > 0 {
			b.WriteString("    blocks:\n")
			for _, bl := range p.Blocks {
				b.WriteString("      - {var: ")
				q(b, bl.Var)
				rows(bl.Rows, bl.Stride, bl.PServer, bl.Bytes)
			}
		}
		if p.Whole != "" {
			b.WriteString("    whole: ")
			q(b, p.Whole)
			b.WriteByte('\n')
		}
	}
	b.WriteString("placement:\n")
	for _, pl := range in.Placement {
		b.WriteString("  - {param: ")
		q(b, pl.Param)
		b.WriteString(", block: ")
		q(b, pl.Block)
		rows(pl.Rows, pl.Stride, pl.PServer, pl.Bytes)
	}
	b.WriteString("pservers:\n")
	for _, l := range in.Load {
		b.WriteString("  - {index: ")
		num(l.PServer)
		if l.Endpoint != "" {
			b.WriteString(", endpoint: ")
			q(b, l.Endpoint)
		}
		b.WriteString(", bytes: ")
		num(l.Bytes)
		b.WriteString(", blocks: ")
		dsl.WriteStringList(b, l.Blocks)
		b.WriteString("}\n")
	}
	b.WriteString("transfers:\n")
	for _, t := range in.Transfers {
		b.WriteString("  - {var: ")
		q(b, t.Var)
		b.WriteString(", from: ")
		q(b, t.From)
		b.WriteString(", to: ")
		q(b, t.To)
		b.WriteString(", shape: ")
		ints(b, t.Shape)
		b.WriteString(", dtype: ")
		q(b, t.DType)
		if t.AtMost {
			b.WriteString(", at_most: true")
		}
		b.WriteString("}\n")
	}
}

func flowStrings(s []string) string {
	parts := make([]string, len(s))
	for i, x := range s {
		parts[i] = dsl.YAMLString(x)
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
