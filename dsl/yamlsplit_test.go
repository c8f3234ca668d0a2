package dsl

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// sameNodes compares two YAML trees as Parse reads them: everything but
// comments, which Parse ignores.
func sameNodes(a, b *yaml.Node, path string) error {
	switch {
	case a == nil || b == nil:
		if a != b {
			return fmt.Errorf("%s: one tree has no node", path)
		}
		return nil
	case a.Kind != b.Kind || a.Style != b.Style || a.Tag != b.Tag || a.Value != b.Value || a.Anchor != b.Anchor:
		return fmt.Errorf("%s: node %v %q (%d:%d) differs from %v %q (%d:%d)", path, a.Kind, a.Value, a.Line, a.Column, b.Kind, b.Value, b.Line, b.Column)
	case a.Line != b.Line || a.Column != b.Column:
		return fmt.Errorf("%s: %q at %d:%d, want %d:%d", path, a.Value, a.Line, a.Column, b.Line, b.Column)
	case len(a.Content) != len(b.Content):
		return fmt.Errorf("%s: %d children, want %d", path, len(a.Content), len(b.Content))
	case (a.Alias == nil) != (b.Alias == nil):
		return fmt.Errorf("%s: alias differs", path)
	}
	for i := range a.Content {
		if err := sameNodes(a.Content[i], b.Content[i], fmt.Sprintf("%s/%d", path, i)); err != nil {
			return err
		}
	}
	return nil
}

// piecesCorpus is every model in the repository and a large generated one.
func piecesCorpus(t *testing.T) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for _, pat := range []string{"../examples/*.yaml", "../testdata/*/*.yaml", "../testdata/*/*/*.yaml", "testdata/*.yaml", "ops/testdata/*.yaml"} {
		files, _ := filepath.Glob(pat)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			out[f] = b
		}
	}
	if len(out) < 10 {
		t.Fatalf("only %d models found", len(out))
	}
	out["deep"] = []byte(deepModel(3000))
	return out
}

// deepModel is a layers-deep MLP of width 4, written as a user would.
func deepModel(layers int) string {
	var b strings.Builder
	b.WriteString("psgraph: 1\nname: deep # a comment\ndata:\n  synthetic: {rows: 64, features: 4, classes: 4}\n  features: {name: x}\n  label: {name: y}\n\nparams:\n")
	for i := range layers {
		fmt.Fprintf(&b, "  W%d: {shape: [4, 4], init: {type: he_normal}}\n  b%d: {shape: [4]}\n", i, i)
	}
	b.WriteString("ops:\n")
	in := "x"
	for i := range layers {
		fmt.Fprintf(&b, "  - {type: matmul, inputs: [%s, W%d], outputs: [m%d]}\n  # layer %d\n  - type: add\n    inputs: [m%d, b%d]\n    outputs: [a%d]\n  - {type: tanh, inputs: [a%d], outputs: [h%d]}\n", in, i, i, i, i, i, i, i, i)
		in = fmt.Sprintf("h%d", i)
	}
	fmt.Fprintf(&b, "  - {type: softmax_cross_entropy, inputs: [%s, y], outputs: [loss]}\ntrain:\n  loss: loss\n  batch: 16\n  steps: 2\n  optimizer: {type: sgd, lr: 0.1}\n", in)
	return b.String()
}

func TestParseYAMLPiecesEqualWhole(t *testing.T) {
	cut := 0
	for name, src := range piecesCorpus(t) {
		whole, err := parseWhole(src)
		for _, want := range []int{2, 7, 64} {
			got := parsePieces(src, want, 3, want != 7)
			if got == nil {
				continue
			}
			cut++
			if err != nil {
				t.Fatalf("%s in %d pieces: parsed, but whole it fails: %v", name, want, err)
			}
			if e := sameNodes(got, whole, name); e != nil {
				t.Fatalf("%s in %d pieces: %v", name, want, e)
			}
		}
	}
	if cut < 20 {
		t.Fatalf("only %d models were cut into pieces: the concurrent path is not taken", cut)
	}
}

// TestParseYAMLPiecesRefuseBadCuts: each document has a line that looks
// like the start of an entry but is not one; cut there, the pieces either
// do not parse (and the document is parsed whole) or the result equals the
// whole parse.
func TestParseYAMLPiecesRefuseBadCuts(t *testing.T) {
	filler := strings.Repeat("  - {type: tanh, inputs: [a], outputs: [b]}\n", 20)
	docs := map[string]string{
		"double-quoted string over lines": "psgraph: 1\nops:\n" + filler + "  - {type: tanh, inputs: [a], outputs: [b], note: \"x\n  - {type: relu}\n  y\"}\n" + filler,
		"single-quoted string over lines": "psgraph: 1\nops:\n" + filler + "  - {type: tanh, note: 'x\n  - z\n  '}\n" + filler,
		"flow list over lines":            "psgraph: 1\nops:\n" + filler + "  - [a,\n  - b,\n  c]\n" + filler,
		"alias to an earlier piece":       "psgraph: 1\nops:\n  - &first {type: tanh}\n" + filler + "  - *first\n" + filler,
		"block scalar":                    "psgraph: 1\nops:\n" + filler + "  - note: |\n      - not an item\n      more\n" + filler,
		"top-level flow over lines":       "psgraph: 1\nname: [a,\nb: c,\n]\nops:\n" + filler,
		"second document":                 "psgraph: 1\nops:\n" + filler + "---\nops:\n" + filler,
		"crlf":                            strings.ReplaceAll("psgraph: 1\nops:\n"+filler+"train: {}\n", "\n", "\r\n"),
		"compact list at column 0":        "psgraph: 1\nops:\n" + strings.ReplaceAll(filler, "  - ", "- ") + "train: {}\n",
		"nested mapping":                  "psgraph: 1\nparams:\n" + strings.Repeat("  a:\n    shape: [1]\n  b: {shape: [2]}\n", 1) + strings.Repeat("  c1: {}\n  c2:\n    x: 1\n", 20),
	}
	for name, src := range docs {
		whole, err := parseWhole([]byte(src))
		for _, want := range []int{2, 5, 40} {
			got := parsePieces([]byte(src), want, 2, true)
			if got == nil {
				continue
			}
			if err != nil {
				t.Fatalf("%s in %d pieces: parsed, but whole it fails: %v", name, want, err)
			}
			if e := sameNodes(got, whole, name); e != nil {
				t.Fatalf("%s in %d pieces: %v", name, want, e)
			}
		}
	}
}

// TestParseLargeModelErrorsAsWhole: a large model with a mistake near its
// end reports the error a single parse reports, with its line. Large is
// just above parallelParseMin (4,200 layers, 1.04 MiB: parsed in pieces on
// two cores); 12,000 layers took three times the CPU and tested no more.
func TestParseLargeModelErrorsAsWhole(t *testing.T) {
	const layers = 4200
	src := deepModel(layers)
	if len(src) < parallelParseMin {
		t.Fatalf("model of %d bytes is below the concurrent size %d", len(src), parallelParseMin)
	}
	near := fmt.Sprintf("inputs: [h%d, W%d]", layers-10, layers-9)
	if !strings.Contains(src, near) {
		t.Fatalf("the model has no %q to break", near)
	}
	bad := strings.Replace(src, near, strings.TrimSuffix(near, "]"), 1)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	_, errPieces := Parse("deep.yaml", []byte(bad))
	runtime.GOMAXPROCS(1)
	_, errWhole := Parse("deep.yaml", []byte(bad))
	if errPieces == nil || errWhole == nil || errPieces.Error() != errWhole.Error() {
		t.Fatalf("errors differ:\n  on 2 cores: %v\n  on 1 core:  %v", errPieces, errWhole)
	}
	runtime.GOMAXPROCS(2)
	if parsePieces([]byte(src), 8, 2, true) == nil {
		t.Fatal("the valid model is not cut into pieces")
	}
	g2, err := Parse("deep.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	runtime.GOMAXPROCS(1)
	g1, err := Parse("deep.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	m2, err2 := Marshal(g2)
	m1, err1 := Marshal(g1)
	if err1 != nil || err2 != nil || string(m1) != string(m2) {
		t.Fatalf("the model parsed in pieces marshals differently (%v, %v)", err1, err2)
	}
	if op := g2.Ops[len(g2.Ops)-1]; op.Pos.Line != strings.Count(src[:strings.Index(src, "softmax_cross_entropy")], "\n")+1 {
		t.Fatalf("last op at line %d", op.Pos.Line)
	}
}

// TestFastEntriesEqualYAML puts entries at the edge of the fast path's
// subset in a cut section: each tree must equal yaml.v3's, and a document
// yaml.v3 refuses must not come back from the pieces.
func TestFastEntriesEqualYAML(t *testing.T) {
	entries := []string{
		"{type: matmul, inputs: [x, W0], outputs: [m0], attrs: {transpose_a: false, transpose_b: true}}",
		"{a: 1, b: -2, c: 0.5, d: -0.25, e: 0, f: -0, g: 10.0, h: [], i: {}}",
		"{a: yes, b: no}", "{a: True}", "{a: null}", "{a: ~}", "{a: 1e5}", "{a: 0x10}", "{a: 010}", "{a: 1_000}",
		"{a: .inf}", "{a: -.inf}", "{a: .nan}", "{a: +1}", "{a: 00.5}", "{a: 1.}", "{a: .5}", "{a: 2026-12-03}",
		"{a: pserver:4}", "{a: \"pserver:4\"}", "{a: \"\"}", "{a: \"x\\\"y\"}", "{a: \"x\\ny\"}", "{a: \"x}", "{a: \"#\"}", "{\"a\": b}", "{a: 'x'}", "{a: @x}", "{a: b} # note", "{a: b,c}", "{a:b}",
		"[a,b]", "[a, , b]", "[a, b, ]", "{a: {b: [1, 2.5, -3, true, $lr, x@GRAD, bw.add.3, /p/q]}}",
		"{a: [1,  2]}", "{ a: b }", "{a: b}  ", "{a: &x b}", "{a: !!str 1}", "{a: <<}", "{<<: b}",
		"{a: é}", "{a: b\t}", "{a: -x}", "{a: -}", "{a: on}", "{a: Off}", "{a: y}", "{a: n}",
		"x", "1", "[x]", "{}", "[]", "- x", "{a: b}, c", "key: value",
	}
	for _, e := range entries {
		for _, section := range []string{"ops:\n", "ops:\n\n# entries\n"} {
			var b strings.Builder
			b.WriteString("psgraph: 1\n" + section)
			for range 40 {
				b.WriteString("  - {type: tanh, inputs: [a], outputs: [b]}\n  - " + e + "\n")
			}
			b.WriteString("params:\n")
			for i := range 40 {
				fmt.Fprintf(&b, "  p%d: %s\n", i, e)
			}
			src := []byte(b.String())
			whole, err := parseWhole(src)
			got := parsePieces(src, 8, 2, true)
			switch {
			case got == nil:
			case err != nil:
				t.Fatalf("entry %q: the pieces parsed, but yaml.v3 refuses the document: %v", e, err)
			default:
				if d := sameNodes(got, whole, e); d != nil {
					t.Fatalf("entry %q: %v", e, d)
				}
			}
		}
	}
}

// The op entries of a long list are decoded in parts on every core: the
// errors come in file order and are the same as on one core.
func TestOpsDecodedInPartsAsInOrder(t *testing.T) {
	src := deepModel(3000)
	for _, r := range [][2]string{
		{"{type: tanh, inputs: [a10], outputs: [h10]}", "{type: tanhh, inputs: [a10], outputs: [h10]}"},
		{"{type: matmul, inputs: [h1999, W2000], outputs: [m2000]}", "{type: matmul, inputs: [h1999, W2000], outputs: [m2000], outputs: [z]}"},
		{"{type: tanh, inputs: [a2900], outputs: [h2900]}", "{type: tanh, inputs: [a2900], outputs: [h2900], attrs: {bogus: 1}}"},
	} {
		if !strings.Contains(src, r[0]) {
			t.Fatalf("the model has no %s", r[0])
		}
		src = strings.Replace(src, r[0], r[1], 1)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(2))
	_, errParts := Parse("deep.yaml", []byte(src))
	runtime.GOMAXPROCS(1)
	_, errOne := Parse("deep.yaml", []byte(src))
	if errParts == nil || errOne == nil || errParts.Error() != errOne.Error() {
		t.Fatalf("errors differ:\n  on 2 cores: %v\n  on 1 core:  %v", errParts, errOne)
	}
	var list ErrorList
	if !errors.As(errParts, &list) || len(list) != 3 {
		t.Fatalf("want the 3 errors, got %v", errParts)
	}
	for i, want := range []string{`unknown op "tanhh"`, `duplicate key "outputs"`, `takes no attributes, got "bogus"`} {
		if !strings.Contains(list[i].Msg, want) {
			t.Errorf("error %d is %q, want %s", i, list[i].Msg, want)
		}
	}
}
