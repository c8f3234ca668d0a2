package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// testName matches a Go test, benchmark or fuzz function's name as the
// docs cite it (with or without backquotes, possibly with a /subtest, or
// followed by * for every test of that prefix).
var testName = regexp.MustCompile(`\b(?:Test|Benchmark|Fuzz)[A-Z][A-Za-z0-9_]*`)

// testFunc matches the declaration of one in a _test.go file.
var testFunc = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Fuzz)[A-Z][A-Za-z0-9_]*)\(`)

// Every test, benchmark or fuzz target that README.md, docs/, examples/,
// bench/, .ci/ and the Go code's comments name as the evidence of a
// sentence exists: a renamed or deleted test must take its citations with
// it, or the sentence it backed is left standing on nothing.
func TestDocsNameExistingTests(t *testing.T) {
	have := map[string]bool{}
	var goFiles []string // their comments cite tests too
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != ".") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		goFiles = append(goFiles, path)
		if !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range testFunc.FindAllSubmatch(src, -1) {
			have[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(have) < 100 {
		t.Fatalf("found only %d test functions: the walk is wrong", len(have))
	}
	docs := append(globAll(t, "README.md", "docs/*.md", "examples/*.md", "bench/*.sh", "bench/*.py", ".ci/*"), goFiles...)
	cited := 0
	for _, path := range docs {
		for i, line := range fileLines(t, path) {
			for _, at := range testName.FindAllStringIndex(line, -1) {
				name := line[at[0]:at[1]]
				cited++
				found := have[name]
				if !found && strings.HasPrefix(line[at[1]:], "*") { // TestSyncEqualsLocal*: a family
					for h := range have {
						found = found || strings.HasPrefix(h, name)
					}
				}
				if !found {
					t.Errorf("%s:%d names %s, which no _test.go declares: name the test that shows the sentence now, or drop the sentence", path, i+1, name)
				}
			}
		}
	}
	if cited < 100 {
		t.Fatalf("found only %d citations in %d files: the scan is wrong", cited, len(docs))
	}
}

// docIdent matches what a sentence of the docs writes in backquotes as a
// Go name: Name, pkg.Name, Type.Method, pkg.Type.Field, each possibly
// called (`ShardOf(k, M)`).
var docIdent = regexp.MustCompile("`([A-Za-z_][A-Za-z0-9_]*(?:\\.[A-Za-z_][A-Za-z0-9_]*)*)(?:\\([^`]*)?`")

// yamlSections are the model file's keys that docs write as paths
// (`data.eval`, `train.steps`): a lower-case member after them is a key,
// not a Go name.
var yamlSections = map[string]bool{"data": true, "train": true, "params": true, "state": true, "ops": true, "assign": true, "clip": true}

// fileExts end a backquoted file name (`trainer.yaml`), not a Go name.
var fileExts = map[string]bool{"yaml": true, "go": true, "md": true, "json": true, "jsonl": true, "txt": true, "csv": true, "tsv": true, "safetensors": true, "py": true, "sh": true, "svg": true, "png": true, "dot": true, "sock": true}

// otherCode are names the docs write for what is not the module's code
// (each with what it is) and the code neither declares nor uses.
var otherCode = map[string]string{
	"PCG":           "math/rand/v2's generator",
	"Stream":        "yamux's stream (Stream.Read)",
	"AnonHugePages": "a field of /proc/meminfo",
	"VmHWM":         "a field of /proc/PID/status",
	"OnFailure":     "a Kubernetes restart policy",
}

// goNames are the module's Go names: each package's top-level names and
// its types' methods by package name, each type's methods and fields
// (promoted ones included) by type name, whatever its package, and, in
// all, every one of those and the names the code uses of other packages.
type goNames struct {
	pkgs    map[string]map[string]bool
	members map[string]map[string]bool
	all     map[string]bool
}

func moduleNames(t *testing.T) goNames {
	t.Helper()
	n := goNames{pkgs: map[string]map[string]bool{}, members: map[string]map[string]bool{}, all: map[string]bool{}}
	embeds := map[string][]string{}
	add := func(m map[string]map[string]bool, k, v string) {
		if m[k] == nil {
			m[k] = map[string]bool{}
		}
		m[k][v] = true
		n.all[v] = true
	}
	typeName := func(e ast.Expr) string {
		for {
			switch x := e.(type) {
			case *ast.StarExpr:
				e = x.X
			case *ast.IndexExpr:
				e = x.X
			case *ast.IndexListExpr:
				e = x.X
			case *ast.SelectorExpr:
				return x.Sel.Name
			case *ast.Ident:
				return x.Name
			default:
				return ""
			}
		}
	}
	fset := token.NewFileSet()
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkg := f.Name.Name
		ast.Inspect(f, func(x ast.Node) bool { // names it uses of other code: x.SetWriteBuffer, {Pdeathsig: ...}
			switch e := x.(type) {
			case *ast.SelectorExpr:
				n.all[e.Sel.Name] = true
			case *ast.KeyValueExpr:
				if id, ok := e.Key.(*ast.Ident); ok {
					n.all[id.Name] = true
				}
			}
			return true
		})
		for _, decl := range f.Decls {
			switch dd := decl.(type) {
			case *ast.FuncDecl:
				if dd.Recv != nil && len(dd.Recv.List) > 0 {
					add(n.members, typeName(dd.Recv.List[0].Type), dd.Name.Name)
					add(n.pkgs, pkg, dd.Name.Name) // `partition.bundleTrainer`: a method of the package
				} else {
					add(n.pkgs, pkg, dd.Name.Name)
				}
			case *ast.GenDecl:
				for _, spec := range dd.Specs {
					switch s := spec.(type) {
					case *ast.ValueSpec:
						for _, id := range s.Names {
							add(n.pkgs, pkg, id.Name)
						}
					case *ast.TypeSpec:
						add(n.pkgs, pkg, s.Name.Name)
						var fields *ast.FieldList
						switch ty := s.Type.(type) {
						case *ast.StructType:
							fields = ty.Fields
						case *ast.InterfaceType:
							fields = ty.Methods
						}
						if fields == nil {
							continue
						}
						for _, f := range fields.List {
							if len(f.Names) == 0 { // embedded
								e := typeName(f.Type)
								add(n.members, s.Name.Name, e)
								embeds[s.Name.Name] = append(embeds[s.Name.Name], e)
							}
							for _, id := range f.Names {
								add(n.members, s.Name.Name, id.Name)
							}
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for changed := true; changed; { // promoted members
		changed = false
		for ty, es := range embeds {
			for _, e := range es {
				for m := range n.members[e] {
					if !n.members[ty][m] {
						add(n.members, ty, m)
						changed = true
					}
				}
			}
		}
	}
	return n
}

// missing says what of a backquoted name parts the module lacks, or ""
// when it has it or the name is not checkable (not Go's, or not the
// module's).
func (n goNames) missing(parts []string) string {
	first, rest := parts[0], parts[1:]
	if otherCode[first] != "" || len(rest) > 0 && fileExts[rest[len(rest)-1]] {
		return ""
	}
	if len(rest) == 0 { // a bare exported CamelCase name; tests are TestDocsNameExistingTests'
		camel := unicode.IsUpper(rune(first[0])) && strings.ToUpper(first) != first && !strings.Contains(first, "_")
		if camel && !testName.MatchString(first) && !n.all[first] {
			return first
		}
		return ""
	}
	for _, p := range rest {
		if strings.Contains(p, "_") && strings.ToLower(p) == p {
			return "" // a JSON or YAML key (`ServeSummary.streamed_parts`)
		}
	}
	if top, ok := n.pkgs[first]; ok && !(yamlSections[first] && !unicode.IsUpper(rune(rest[0][0]))) {
		if !top[rest[0]] {
			return first + "." + rest[0]
		}
		if len(rest) > 1 && n.members[rest[0]] != nil && !n.members[rest[0]][rest[1]] {
			return first + "." + rest[0] + "." + rest[1]
		}
		return ""
	}
	if m, ok := n.members[first]; ok && len(first) > 1 {
		if !m[rest[0]] {
			return first + "." + rest[0]
		}
	}
	return ""
}

// The docs name only Go names the code has: a backquoted pkg.Name,
// Type.Method or pkg.Type.Member whose package or type is the module's,
// and a backquoted exported CamelCase Name (called or not), must be
// declared (outside tests), so a renamed or removed function takes its
// mentions with it.
// Names that are not the module's (`torch.nn.LayerNorm`, `math.Exp`) and
// model-file paths (`data.eval`, `train.steps`) are not checked.
func TestDocsNameExistingIdentifiers(t *testing.T) {
	names := moduleNames(t)
	if len(names.pkgs["dsl"]) < 50 || len(names.members["Table"]) < 10 {
		t.Fatalf("read %d names of dsl and %d members of Table: the parse is wrong", len(names.pkgs["dsl"]), len(names.members["Table"]))
	}
	docs := globAll(t, "README.md", "docs/*.md", "examples/*.md")
	checked := 0
	for _, path := range docs {
		for i, line := range fileLines(t, path) {
			for _, m := range docIdent.FindAllStringSubmatch(line, -1) {
				checked++
				if miss := names.missing(strings.Split(m[1], ".")); miss != "" {
					t.Errorf("%s:%d names `%s`, but the code declares no %s: name what the code has now, or drop the mention", path, i+1, m[1], miss)
				}
			}
		}
	}
	if checked < 500 {
		t.Fatalf("found only %d backquoted names in %d files: the scan is wrong", checked, len(docs))
	}
}

// globAll lists the files of every pattern.
func globAll(t *testing.T, patterns ...string) []string {
	t.Helper()
	var out []string
	for _, pattern := range patterns {
		m, err := filepath.Glob(pattern)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, m...)
	}
	return out
}

// fileLines reads a file's lines.
func fileLines(t *testing.T, path string) []string {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(string(src), "\n")
}
