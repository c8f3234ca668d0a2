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
			if under(d, module+"/exec") {
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

type listed struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// goListDeps runs `go list -deps -json` on patterns, with the go command
// of the toolchain running the test.
func goListDeps(t *testing.T, patterns ...string) map[string]listed {
	t.Helper()
	gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(gobin); err != nil {
		if gobin, err = exec.LookPath("go"); err != nil {
			t.Skip("no go command to list packages with")
		}
	}
	cmd := exec.Command(gobin, append([]string{"list", "-deps", "-json=ImportPath,Imports,Deps"}, patterns...)...)
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
