package dsl_test

import (
	"os"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ops"
)

// TestDocsCoverCatalog fails when docs/dsl.md lacks a reference row for an
// op of the catalog, an initializer or a built-in optimizer, so that new ops
// are documented as they are added.
func TestDocsCoverCatalog(t *testing.T) {
	src, err := os.ReadFile("../docs/dsl.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(src)
	row := func(kind, name string) {
		if !strings.Contains(doc, "\n| `"+name+"` |") {
			t.Errorf("docs/dsl.md has no table row for %s %s (add a line starting with | `%s` |)", kind, name, name)
		}
	}
	for _, name := range ops.Names() {
		def, _ := ops.Lookup(name)
		if def.Internal {
			if !strings.Contains(doc, "`"+name+"`") {
				t.Errorf("docs/dsl.md does not mention internal op %s", name)
			}
			continue
		}
		row("op", name)
	}
	for _, name := range dsl.InitNames() {
		row("initializer", name)
	}
	for _, name := range dsl.BuiltinNames() {
		row("optimizer", name)
		for h := range dsl.Builtins()[name].Hyper {
			if !strings.Contains(doc, "`"+h+"`") {
				t.Errorf("docs/dsl.md does not mention hyper-parameter %s of optimizer %s", h, name)
			}
		}
	}
}
