package ops

import (
	"github.com/psgraph/psgraph/dsl/ir"
)

// BroadcastShape applies numpy broadcasting to two shapes.
func BroadcastShape(a, b ir.Shape) (ir.Shape, error) {
	n := max(len(a), len(b))
	out := make(ir.Shape, n)
	for i := 0; i < n; i++ {
		da, db := 1, 1
		if j := len(a) - n + i; j >= 0 {
			da = a[j]
		}
		if j := len(b) - n + i; j >= 0 {
			db = b[j]
		}
		switch {
		case da == db:
			out[i] = da
		case da == 1:
			out[i] = db
		case db == 1:
			out[i] = da
		default:
			return nil, Errorf("shapes %v and %v do not broadcast (dimension %d: %d vs %d)", a, b, i, da, db)
		}
	}
	return out, nil
}
