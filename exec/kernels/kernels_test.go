package kernels

import (
	"maps"
	"slices"
	"testing"

	"github.com/psgraph/psgraph/dsl/ops"
)

// Every op of the catalog has a kernel and every kernel an op: the two
// registries, keyed by op name, list the same names.
func TestEveryOpHasAKernel(t *testing.T) {
	catalog, kernels := ops.Names(), slices.Sorted(maps.Keys(builders))
	for _, name := range catalog {
		if _, ok := builders[name]; !ok {
			t.Errorf("op %s of the catalog has no kernel in exec/kernels", name)
		}
	}
	for _, name := range kernels {
		if _, ok := ops.Lookup(name); !ok {
			t.Errorf("kernel %s has no op in the catalog (dsl/ops)", name)
		}
	}
	if !slices.Equal(catalog, kernels) {
		t.Errorf("catalog %v\nkernels %v", catalog, kernels)
	}
	if len(catalog) == 0 {
		t.Fatal("the catalog is empty")
	}
	if _, err := Build("no_such_op", Args{}); err == nil {
		t.Error("Build of an op without a kernel succeeded")
	}
}
