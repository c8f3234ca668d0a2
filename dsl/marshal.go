package dsl

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/psgraph/psgraph/dsl/ir"
)

// Marshal writes g as DSL YAML that LoadBytes reads back into an equal
// graph: the same variables, ops (with every attribute, section, param and
// place), assigns and training configuration. The output is deterministic:
// variables in declaration order, keys in a fixed order, attributes sorted,
// one flow-style line per variable and op as in the examples.
//
// The data file is written relative to the directory of g.File, so a graph
// written next to g.File finds its data again. An expanded graph (with
// backward or optimize ops) is written without train.optimizer, since its
// update ops are already in the file.
func Marshal(g *Graph) ([]byte, error) {
	var b bytes.Buffer
	b.Grow(192*len(g.Ops) + 96*len(g.Vars) + 1024) // about a line each
	if err := encode(&b, g, nil); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

// encodeChunk is the size of the pieces Encode hands its writer.
const encodeChunk = 256 << 10

// Encode writes g to w as Marshal does, a piece of about 256 KiB at a
// time: its memory does not grow with the model (split writes subgraphs
// of a million ops this way).
func Encode(w io.Writer, g *Graph) error {
	var b bytes.Buffer
	b.Grow(encodeChunk + 4096)
	flush := func() error {
		_, err := w.Write(b.Bytes())
		b.Reset()
		return err
	}
	if err := encode(&b, g, flush); err != nil {
		return err
	}
	return flush()
}

// encode writes g into b, calling flush (when not nil) whenever b holds
// encodeChunk bytes or more after a line.
func encode(b *bytes.Buffer, g *Graph, flush func() error) error {
	spill := func() error {
		if flush != nil && b.Len() >= encodeChunk {
			return flush()
		}
		return nil
	}
	// An optimizer is written before expansion only; a user-defined one
	// has no flow form.
	expanded := g.Expanded()
	if !expanded {
		if t := g.Train; t != nil && t.Optimizer != nil && t.Optimizer.Type == "" {
			return Errorf(t.Optimizer.Pos, "cannot write a user-defined optimizer before expansion; expand the graph first (dsl.Load does)")
		}
		for _, p := range g.ParamOptimizers() {
			if o := g.Vars[p].Optimizer; o.Type == "" {
				return Errorf(o.Pos, "cannot write a user-defined optimizer before expansion; expand the graph first (dsl.Load does)")
			}
		}
	}
	fmt.Fprintf(b, "psgraph: %d\n", SchemaVersion)
	if g.Name != "" {
		fmt.Fprintf(b, "name: %s\n", YAMLString(g.Name))
	}
	if g.Data != nil {
		if err := writeData(b, g); err != nil {
			return err
		}
	}
	for _, sec := range []struct {
		key  string
		kind VarKind
	}{{"params", KindParam}, {"state", KindState}} {
		first := true
		for _, name := range g.Order {
			v := g.Vars[name]
			if v.Kind != sec.kind {
				continue
			}
			if first {
				b.WriteString(sec.key + ":\n")
				first = false
			}
			b.WriteString("  ")
			WriteYAMLString(b, name)
			b.WriteString(": ")
			writeVar(b, v, !expanded)
			b.WriteByte('\n')
			if err := spill(); err != nil {
				return err
			}
		}
	}
	if len(g.Ops) > 0 {
		b.WriteString("ops:\n")
		for _, op := range g.Ops {
			b.WriteString("  - ")
			if err := writeOp(b, op); err != nil {
				return err
			}
			b.WriteByte('\n')
			if err := spill(); err != nil {
				return err
			}
		}
	}
	if len(g.Assigns) > 0 {
		b.WriteString("assign:\n")
		for _, a := range g.Assigns {
			b.WriteString("  ")
			WriteYAMLString(b, a.Target)
			b.WriteString(": ")
			WriteYAMLString(b, a.Value)
			b.WriteByte('\n')
			if err := spill(); err != nil {
				return err
			}
		}
	}
	if t := g.Train; t != nil {
		b.WriteString("train:\n")
		if t.Loss != "" {
			fmt.Fprintf(b, "  loss: %s\n", YAMLString(t.Loss))
		}
		if len(t.Metrics) > 0 {
			fmt.Fprintf(b, "  metrics: %s\n", stringList(t.Metrics))
		}
		fmt.Fprintf(b, "  batch: %d\n", t.Batch)
		if t.Steps > 0 {
			fmt.Fprintf(b, "  steps: %d\n", t.Steps)
		}
		if t.Epochs > 0 {
			fmt.Fprintf(b, "  epochs: %d\n", t.Epochs)
		}
		if t.EvalEvery > 0 {
			fmt.Fprintf(b, "  eval_every: %d\n", t.EvalEvery)
		}
		if o := t.Optimizer; !expanded && g.HasOptimizer() {
			if c := t.Clip; c != nil {
				b.WriteString("  clip: {")
				sep := ""
				if c.Value > 0 {
					fmt.Fprintf(b, "value: %s", formatFloat(c.Value))
					sep = ", "
				}
				if c.Norm > 0 {
					fmt.Fprintf(b, "%snorm: %s", sep, formatFloat(c.Norm))
				}
				b.WriteString("}\n")
			}
			if o != nil {
				b.WriteString("  optimizer: ")
				writeOptimizer(b, o)
				b.WriteByte('\n')
			}
		}
	}
	return nil
}

func writeData(b *bytes.Buffer, g *Graph) error {
	d := g.Data
	b.WriteString("data:\n")
	switch {
	case d.Online != nil:
		writeOnlineSource(b, g) // online.go
	case d.CSV != "" && d.Format != "":
		fmt.Fprintf(b, "  %s: %s\n", d.Format, YAMLString(RelPath(filepath.Dir(g.File), d.CSV)))
	case d.CSV != "":
		fmt.Fprintf(b, "  csv: %s\n", YAMLString(RelPath(filepath.Dir(g.File), d.CSV)))
	case d.Synthetic != nil:
		s := d.Synthetic
		fmt.Fprintf(b, "  synthetic: {rows: %d, features: %d, classes: %d, seed: %d}\n", s.Rows, s.Features, s.Classes, s.Seed)
	default:
		return Errorf(d.Pos, "data has no source to write")
	}
	spec := func(c *Column, isRange bool) {
		fmt.Fprintf(b, "{name: %s", YAMLString(c.Name))
		switch {
		case d.Synthetic != nil: // columns follow from the synthetic layout
		case isRange || len(c.Cols) != 1:
			b.WriteString(", columns: " + colsList(c.Cols))
		default:
			fmt.Fprintf(b, ", column: %d", c.Cols[0])
		}
		switch {
		case c.Fill != nil && c.KeyType == KeyInt64:
			fmt.Fprintf(b, ", fill: %d", c.FillKey)
		case c.Fill != nil:
			fmt.Fprintf(b, ", fill: %s", formatFloat(*c.Fill))
		}
		if c.Transform != "" {
			fmt.Fprintf(b, ", transform: %s", YAMLString(c.Transform))
		}
		if c.HashBuckets > 0 {
			fmt.Fprintf(b, ", hash_buckets: %d", c.HashBuckets)
		}
		if c.KeyType != "" {
			fmt.Fprintf(b, ", key: %s", c.KeyType)
		}
		if c.SharedSpace {
			b.WriteString(", shared_space: true")
		}
		if c.NumIDs > 0 {
			fmt.Fprintf(b, ", num_ids: %d", c.NumIDs)
		}
		if c.Separator != 0 {
			fmt.Fprintf(b, ", separator: %s, max_len: %d", strconv.Quote(string(c.Separator)), c.MaxLen)
		}
		if c.Float {
			b.WriteString(", dtype: float32")
		}
		writeMapping(b, g, c)
		b.WriteString("}")
	}
	col := func(key string, c *Column, isRange bool) {
		if c == nil {
			return
		}
		fmt.Fprintf(b, "  %s: ", key)
		spec(c, isRange)
		b.WriteString("\n")
	}
	cols := func(key string, cs []*Column) {
		if len(cs) == 1 {
			col(key, cs[0], true)
			return
		}
		if len(cs) > 1 {
			fmt.Fprintf(b, "  %s:\n", key)
		}
		for _, c := range cs {
			b.WriteString("    - ")
			spec(c, true)
			b.WriteString("\n")
		}
	}
	switch d.Delimiter {
	case ',', 0:
	case '\t':
		b.WriteString("  delimiter: tab\n")
	default:
		fmt.Fprintf(b, "  delimiter: %s\n", strconv.Quote(string(d.Delimiter)))
	}
	cols("features", d.Features)
	if d.Header {
		b.WriteString("  header: true\n")
	}
	if d.Names != nil && d.Format != FormatParquet && !d.Header {
		b.WriteString("  names: " + stringList(d.Names) + "\n")
	}
	col("label", d.Label, d.Label != nil && len(d.Label.Cols) > 1)
	cols("ids", d.IDs)
	fmt.Fprintf(b, "  normalize: %s\n  shuffle: %t\n  seed: %d\n", YAMLString(d.Normalize), d.Shuffle, d.Seed)
	if d.Stream {
		b.WriteString("  stream: true\n")
	}
	if d.Online != nil {
		writeOnlineKeys(b, d.Online)
	}
	switch e := d.Eval; {
	case e == nil:
	case e.CSV != "":
		fmt.Fprintf(b, "  eval: {csv: %s}\n", YAMLString(RelPath(filepath.Dir(g.File), e.CSV)))
	default:
		fmt.Fprintf(b, "  eval: {fraction: %s", formatFloat(e.Fraction))
		if e.Stratify {
			b.WriteString(", stratify: true")
		}
		if e.Seed != nil {
			fmt.Fprintf(b, ", seed: %d", *e.Seed)
		}
		b.WriteString("}\n")
	}
	return nil
}

// RelPath expresses path relative to dir when both are relative (to the
// working directory); otherwise it returns path made absolute.
func RelPath(dir, path string) string {
	if !filepath.IsAbs(dir) && !filepath.IsAbs(path) {
		if r, err := filepath.Rel(dir, path); err == nil {
			return filepath.ToSlash(r)
		}
	}
	if a, err := filepath.Abs(path); err == nil {
		return a
	}
	return path
}

// writeOptimizer writes a built-in optimizer as a flow mapping: its type,
// its lr (with the schedule) and the hyper-parameters off their defaults.
func writeOptimizer(b *bytes.Buffer, o *Optimizer) {
	fmt.Fprintf(b, "{type: %s", YAMLString(o.Type))
	for _, k := range sortedKeys(o.Hyper) {
		if sc := o.Schedule; k == "lr" && sc != nil {
			fmt.Fprintf(b, ", lr: {value: %s, schedule: %s", formatFloat(o.Hyper[k]), sc.Kind)
			for _, f := range []struct {
				key string
				v   int
			}{{"warmup", sc.Warmup}, {"steps", sc.Steps}, {"every", sc.Every}} {
				if f.v != 0 {
					fmt.Fprintf(b, ", %s: %d", f.key, f.v)
				}
			}
			if sc.MinLR != 0 {
				fmt.Fprintf(b, ", min_lr: %s", formatFloat(sc.MinLR))
			}
			if sc.Gamma != 0 {
				fmt.Fprintf(b, ", gamma: %s", formatFloat(sc.Gamma))
			}
			b.WriteString("}")
			continue
		}
		if def, ok := o.Tmpl.Hyper[k]; ok && k != "lr" && def == o.Hyper[k] {
			continue // the built-in's default
		}
		fmt.Fprintf(b, ", %s: %s", YAMLString(k), formatFloat(o.Hyper[k]))
	}
	b.WriteString("}")
}

// writeVar writes a variable's flow mapping: {shape: [..], dtype: ..,
// init: {..}, place: .., of: .., block: {..}, optimizer: {..}} (the
// optimizer when withOptimizer: before expansion).
func writeVar(b *bytes.Buffer, v *Var, withOptimizer bool) {
	if dy := v.Dynamic; dy != nil {
		writeDynamic(b, dy)
	} else {
		b.WriteString("{shape: ")
		WriteIntList(b, v.Shape)
	}
	if v.DType != ir.F32 {
		b.WriteString(", dtype: ")
		b.WriteString(v.DType.String())
	}
	if in := v.Init; in != nil {
		b.WriteString(", init: {type: ")
		WriteYAMLString(b, in.Type)
		var keys [8]string
		for _, k := range sortedAttrKeys(keys[:0], in.Attrs) {
			b.WriteString(", ")
			WriteYAMLString(b, k)
			b.WriteString(": ")
			writeValue(b, in.Attrs[k])
		}
		b.WriteByte('}')
	}
	if v.Place != "" {
		b.WriteString(", place: ")
		WriteYAMLString(b, v.Place)
	}
	if v.Of != "" {
		b.WriteString(", of: ")
		WriteYAMLString(b, v.Of)
	}
	if bl := v.Block; bl != nil {
		b.WriteString(", block: {of: ")
		WriteYAMLString(b, bl.Of)
		b.WriteString(", rows: [")
		b.Write(strconv.AppendInt(b.AvailableBuffer(), int64(bl.Start), 10))
		b.WriteString(", ")
		b.Write(strconv.AppendInt(b.AvailableBuffer(), int64(bl.End), 10))
		b.WriteByte(']')
		if bl.Stride > 1 {
			b.WriteString(", stride: ")
			b.Write(strconv.AppendInt(b.AvailableBuffer(), int64(bl.Stride), 10))
		}
		b.WriteString(", shape: ")
		WriteIntList(b, bl.Shape)
		b.WriteByte('}')
	}
	if o := v.Optimizer; o != nil && withOptimizer {
		b.WriteString(", optimizer: ")
		writeOptimizer(b, o)
	}
	b.WriteByte('}')
}

// writeDynamic opens a dynamic table's mapping with its dynamic: key.
func writeDynamic(b *bytes.Buffer, dy *Dynamic) {
	fmt.Fprintf(b, "{dynamic: {dim: %d", dy.Dim)
	if dy.MinCount != 0 {
		fmt.Fprintf(b, ", min_count: %d", dy.MinCount)
	}
	if dy.Probability != 0 {
		fmt.Fprintf(b, ", probability: %s", strconv.FormatFloat(dy.Probability, 'g', -1, 64))
	}
	if dy.SketchBytes != 0 {
		fmt.Fprintf(b, ", sketch_bytes: %d", dy.SketchBytes)
	}
	if dy.TTLSteps != 0 {
		fmt.Fprintf(b, ", ttl_steps: %d", dy.TTLSteps)
	}
	if dy.Capacity != 0 {
		fmt.Fprintf(b, ", capacity: %d, policy: %s", dy.Capacity, dy.Policy)
	}
	if sh := dy.Shard; sh != nil {
		b.WriteString(", shard: {of: ")
		WriteYAMLString(b, sh.Of)
		fmt.Fprintf(b, ", index: %d, count: %d}", sh.Index, sh.Count)
	}
	b.WriteByte('}')
}

// writeOp writes op as a flow mapping. It writes into b directly: split
// writes hundreds of thousands of ops.
func writeOp(b *bytes.Buffer, op *Op) error {
	b.WriteString("{type: ")
	WriteYAMLString(b, op.Type)
	if len(op.Inputs) > 0 {
		b.WriteString(", inputs: ")
		WriteStringList(b, op.Inputs)
	}
	if len(op.Outputs) > 0 {
		b.WriteString(", outputs: ")
		WriteStringList(b, op.Outputs)
	}
	if len(op.Attrs) > 0 {
		b.WriteString(", attrs: {")
		var keys [8]string
		for i, k := range sortedAttrKeys(keys[:0], op.Attrs) {
			v := op.Attrs[k]
			if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
				return Errorf(op.Pos, "op %s attribute %s is %v, which a model file cannot hold", op.Type, k, f)
			}
			if i > 0 {
				b.WriteString(", ")
			}
			WriteYAMLString(b, k)
			b.WriteString(": ")
			writeValue(b, v)
		}
		b.WriteByte('}')
	}
	if op.Section != Forward {
		b.WriteString(", section: ")
		b.WriteString(op.Section.String())
	}
	if op.Param != "" {
		b.WriteString(", param: ")
		WriteYAMLString(b, op.Param)
	}
	if op.Place != "" {
		b.WriteString(", place: ")
		WriteYAMLString(b, op.Place)
	}
	b.WriteByte('}')
	return nil
}

// writeValue writes an attribute value.
func writeValue(b *bytes.Buffer, v any) {
	switch x := v.(type) {
	case float64:
		b.Write(appendFloat(b.AvailableBuffer(), x))
	case int:
		b.Write(strconv.AppendInt(b.AvailableBuffer(), int64(x), 10))
	case bool:
		b.Write(strconv.AppendBool(b.AvailableBuffer(), x))
	case string:
		WriteYAMLString(b, x)
	case []int:
		WriteIntList(b, x)
	default:
		WriteYAMLString(b, fmt.Sprint(v))
	}
}

// formatFloat writes the shortest decimal that parses back to f, always
// recognizable as a YAML float.
func formatFloat(f float64) string { return string(appendFloat(nil, f)) }

// appendFloat appends formatFloat(f) to dst.
func appendFloat(dst []byte, f float64) []byte {
	start := len(dst)
	dst = strconv.AppendFloat(dst, f, 'g', -1, 64)
	s := dst[start:]
	e := bytes.IndexAny(s, "eE")
	switch {
	case e < 0 && bytes.IndexByte(s, '.') < 0:
		return append(dst, ".0"...)
	case e >= 0 && bytes.IndexByte(s[:e], '.') < 0:
		exp := string(s[e:])
		return append(append(dst[:start+e], ".0"...), exp...)
	}
	return dst
}

// WriteIntList writes a flow list of ints ([1, 2]) into b without
// allocating (the model and plan writers have hundreds of thousands of
// such lines).
func WriteIntList(b *bytes.Buffer, v []int) {
	b.WriteByte('[')
	for i, x := range v {
		if i > 0 {
			b.WriteString(", ")
		}
		b.Write(strconv.AppendInt(b.AvailableBuffer(), int64(x), 10))
	}
	b.WriteByte(']')
}

// WriteStringList writes a flow list of YAMLStrings into b.
func WriteStringList(b *bytes.Buffer, s []string) {
	b.WriteByte('[')
	for i, x := range s {
		if i > 0 {
			b.WriteString(", ")
		}
		WriteYAMLString(b, x)
	}
	b.WriteByte(']')
}

func stringList(s []string) string {
	parts := make([]string, len(s))
	for i, x := range s {
		parts[i] = YAMLString(x)
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// plainSafe reports whether YAML reads s back as the same string when
// written unquoted, inside or outside flow collections: a letter or _,
// then letters, digits and _.@/- (not a reserved word, see YAMLString).
// A loop, not a regexp: split writes it for every name of every op.
func plainSafe(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c == '_':
		case i > 0 && (c >= '0' && c <= '9' || c == '.' || c == '@' || c == '/' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// yamlReserved are the words YAML reads as something other than a
// string, in any case.
var yamlReserved = []string{"true", "false", "null", "yes", "no", "on", "off", "y", "n", "nan", "inf"}

// plain reports whether s is written unquoted (see YAMLString).
func plain(s string) bool {
	if !plainSafe(s) {
		return false
	}
	// Every reserved word starts with one of these letters.
	if c := s[0] | 0x20; len(s) <= 5 && (c == 't' || c == 'f' || c == 'n' || c == 'y' || c == 'o' || c == 'i') {
		for _, w := range yamlReserved {
			if strings.EqualFold(s, w) {
				return false
			}
		}
	}
	return true
}

// YAMLString writes s plain when that is unambiguous, double-quoted otherwise.
func YAMLString(s string) string {
	if plain(s) {
		return s
	}
	return strconv.Quote(s)
}

// WriteYAMLString writes YAMLString(s) into b without allocating.
func WriteYAMLString(b *bytes.Buffer, s string) {
	if plain(s) {
		b.WriteString(s)
		return
	}
	b.Write(strconv.AppendQuote(b.AvailableBuffer(), s))
}

// sortedAttrKeys appends m's keys to buf, sorted: with buf on the
// caller's stack, an op's few attributes are sorted without allocating.
func sortedAttrKeys(buf []string, m map[string]any) []string {
	for k := range m {
		buf = append(buf, k)
	}
	slices.Sort(buf)
	return buf
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
