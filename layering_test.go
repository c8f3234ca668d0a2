package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/psgraph/psgraph"

// The front end sits above the runtime, never below it: the model
// language (dsl/...), the splitter (partition) and the pictures
// (cmd/internal/viz) link nothing under exec, so a tool that only reads,
// checks, splits or draws models does not link the kernels, the BLAS
// assembly or the transport. The test asks `go list -deps` for what they
// import (test files aside) and names the import chain to any exec package.
func TestFrontEndImportsNoRuntime(t *testing.T) {
	roots := []string{module + "/dsl/...", module + "/partition/...", module + "/cmd/internal/viz"}
	pkgs := goListDeps(t, roots...)
	isRoot := func(p string) bool {
		return p == module+"/cmd/internal/viz" || under(p, module+"/dsl") || under(p, module+"/partition")
	}
	var checked []string
	for _, p := range pkgs {
		if !isRoot(p.ImportPath) {
			continue
		}
		checked = append(checked, p.ImportPath)
		for _, d := range p.Deps {
			if p.ImportPath == module+"/dsl/ir" && under(d, module) {
				t.Errorf("dsl/ir, the IR's type names, is a leaf but imports %s", d)
			}
			if under(d, module+"/exec") || under(d, module+"/transport") {
				t.Errorf("%s depends on %s: %s", p.ImportPath, d, strings.Join(chain(pkgs, p.ImportPath, d), " -> "))
			}
		}
	}
	for _, want := range []string{module + "/dsl", module + "/dsl/ir", module + "/dsl/ops", module + "/partition", module + "/cmd/internal/viz"} {
		if !slices.Contains(checked, want) {
			t.Errorf("go list did not list %s; checked %v", want, checked)
		}
	}
}

// The file formats (exec/modelfile: model files, checkpoints, table
// chains) know nothing of how a job talks or is watched: no transport
// (nor yamux under it) and no metrics (nor Prometheus). A checkpoint's
// watcher is an interface of modelfile's own, nodes are named by
// strings, so a tool that reads or writes model files links neither.
func TestModelfileImportsNoTransportNorMetrics(t *testing.T) {
	pkgs, p := depsOf(t, "exec/modelfile")
	for _, d := range p.Deps {
		for _, banned := range []string{module + "/transport", module + "/exec/metrics", "github.com/hashicorp/yamux", "github.com/prometheus"} {
			if under(d, banned) {
				t.Errorf("exec/modelfile depends on %s: %s", d, strings.Join(chain(pkgs, p.ImportPath, d), " -> "))
			}
		}
	}
}

// Imports point down: every package of the module has a layer, and a
// package imports only packages of lower layers (test files aside), so two
// packages of one layer never import each other: the trainer and the
// pserver loops, say, meet only in exec/job. A new package must be given
// its layer here, with the one job it does in its doc.go.
var layers = [][]string{
	{"dsl/ir", "exec/blas", "exec/rejoin", "exec/halt", "exec/replicate", "exec/data/criteo", "exec/data/tfrecord", "exec/progress", "transport/testcert", "internal/atomicfile", "internal/slab", "internal/safetensors", "internal/csvrow", "internal/parquetschema"},
	{"dsl/ops", "exec/tensor", "exec/dyntable", "transport"},
	{"dsl", "exec/kernels", "exec/metrics"},
	{"partition", "exec/data", "internal/testfix"},
	{"cmd/internal/viz", "cmd/internal/k8s", "exec/modelfile", "exec/stream"},
	{"exec/program", "exec/stream/kafka"},
	{"exec/comm", "exec/evaluate"},
	{"exec/trainer", "exec/pserver", "exec/serve"},
	{"exec/job", "exec/launch"},
	{"exec/node"},
	{"cmd"},
	{"", "internal/cmd/fakekafka"}, // main packages
}

func TestImportsPointDown(t *testing.T) {
	layer := map[string]int{}
	for i, ps := range layers {
		for _, p := range ps {
			layer[strings.TrimSuffix(module+"/"+p, "/")] = i
		}
	}
	pkgs := goListDeps(t, module+"/...")
	for _, p := range pkgs {
		if !under(p.ImportPath, module) {
			continue
		}
		lp, ok := layer[p.ImportPath]
		if !ok {
			t.Errorf("%s has no layer in layering_test.go: give it one (and a doc.go saying its one job)", p.ImportPath)
			continue
		}
		for _, q := range p.Imports {
			if !under(q, module) {
				continue
			}
			if lq, ok := layer[q]; ok && lq >= lp {
				t.Errorf("%s (layer %d) imports %s (layer %d): imports must point down", p.ImportPath, lp, q, lq)
			}
		}
	}
}

// The decisions of the restart protocol (exec/rejoin), of the stop
// protocol (exec/halt) and of a serving replica (exec/replicate) are pure:
// the packages import only the standard library, so nothing in them can
// do I/O on the job's behalf or block on a peer.
func TestRejoinImportsOnlyTheStandardLibrary(t *testing.T) {
	for _, pkg := range []string{"exec/rejoin", "exec/halt", "exec/replicate"} {
		_, p := depsOf(t, pkg)
		for _, d := range p.Deps {
			if strings.Contains(strings.SplitN(d, "/", 2)[0], ".") {
				t.Errorf("%s depends on %s, which is not in the standard library", pkg, d)
			}
		}
	}
}

// Every package says its one job in its package comment ("Package x
// ...", or "Command psgraph ..." for main), as go doc shows it: a new
// package without one fails here.
func TestEveryPackageHasADocComment(t *testing.T) {
	gobin := goCommand(t)
	out, err := exec.Command(gobin, "list", "-json=ImportPath,Name,Doc", module+"/...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(out))
	n := 0
	for {
		var p struct{ ImportPath, Name, Doc string }
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		n++
		want := "Package " + p.Name + " "
		if p.Name == "main" {
			want = "Command "
		}
		if !strings.HasPrefix(p.Doc, want) {
			t.Errorf("%s has no package comment starting %q (go doc shows %q): say its one job in a doc.go", p.ImportPath, want, p.Doc)
		}
	}
	if n < 30 {
		t.Fatalf("go list listed %d packages: the listing is wrong", n)
	}
}

// depsOf lists the package at path rel in the module with its
// dependencies, and returns that package too.
func depsOf(t *testing.T, rel string) (map[string]listed, listed) {
	t.Helper()
	pkgs := goListDeps(t, module+"/"+rel)
	p, ok := pkgs[module+"/"+rel]
	if !ok {
		t.Fatalf("go list did not list %s", rel)
	}
	return pkgs, p
}

type listed struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// goListDeps runs `go list -deps -json` on patterns, with the go command
// of the toolchain running the test.
func goListDeps(t *testing.T, patterns ...string) map[string]listed {
	t.Helper()
	cmd := exec.Command(goCommand(t), append([]string{"list", "-deps", "-json=ImportPath,Imports,Deps"}, patterns...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := map[string]listed{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

// goCommand is the go command of the toolchain running the test (the
// test skips without one).
func goCommand(t *testing.T) string {
	t.Helper()
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		if gobin, err = exec.LookPath("go"); err != nil {
			t.Skip("no go command to list packages with")
		}
	}
	return gobin
}

// under reports whether package p is dir or below it.
func under(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }

// chain returns a shortest import path from package from to package to.
func chain(pkgs map[string]listed, from, to string) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if p == to {
			var path []string
			for ; p != ""; p = prev[p] {
				path = append(path, strings.TrimPrefix(p, module+"/"))
			}
			slices.Reverse(path)
			return path
		}
		for _, q := range pkgs[p].Imports {
			if _, seen := prev[q]; !seen {
				prev[q] = p
				queue = append(queue, q)
			}
		}
	}
	return []string{from, "...", to}
}
