package kernels

import "github.com/psgraph/psgraph/exec/tensor"

// The outer broadcast of a binary op: x [N, 1] against y [1, M] or [M]
// (or the other way round) gives z [N, M], z[i, j] = x[i] op y[j]: a
// column against a row, as a [batch, batch] mask compares each row's id
// with every column's. The general broadcast walks an index per element;
// this runs row by row.

// outerShapes reports whether x and y broadcast to z as a column [N, 1]
// and a row [1, M] or [M], z being [N, M]; colFirst: x is the column.
func outerShapes(x, y, z tensor.Shape) (ok, colFirst bool) {
	if len(z) != 2 {
		return false, false
	}
	col := func(s tensor.Shape) bool { return len(s) == 2 && s[0] == z[0] && s[1] == 1 }
	row := func(s tensor.Shape) bool {
		return len(s) == 2 && s[0] == 1 && s[1] == z[1] || len(s) == 1 && s[0] == z[1]
	}
	switch {
	case z[0] == 1 || z[1] == 1:
		return false, false // a vector: the suffix and scalar paths handle it
	case col(x) && row(y):
		return true, true
	case row(x) && col(y):
		return true, false
	}
	return false, false
}

// binOuter computes z[i, j] = x[i] op y[j] for a column x (colFirst) or
// z[i, j] = x[j] op y[i] for a row x; col holds n values, row m. A
// comparison with the column first is the other comparison with the row
// first (c < r is r > c), and add and mul commute, so each runs as a
// loop of its own.
func binOuter(op binOp, col, row, z []float32, colFirst bool) {
	m := len(row)
	if !colFirst {
		switch op {
		case opLess:
			op = opGreater
		case opGreater:
			op = opLess
		case opAdd, opMul, opMin, opMax:
		default:
			for i, c := range col {
				out := z[i*m : (i+1)*m]
				for j, r := range row {
					out[j] = apply(op, r, c)
				}
			}
			return
		}
	}
	for i, c := range col {
		out := z[i*m : (i+1)*m : (i+1)*m]
		switch op {
		case opLess: // c < r
			for j, r := range row {
				out[j] = b2f(c < r)
			}
		case opGreater:
			for j, r := range row {
				out[j] = b2f(c > r)
			}
		case opAdd:
			for j, r := range row {
				out[j] = c + r
			}
		case opMul:
			for j, r := range row {
				out[j] = c * r
			}
		default:
			for j, r := range row {
				out[j] = apply(op, c, r)
			}
		}
	}
}

func b2f(b bool) float32 {
	if b {
		return 1
	}
	return 0
}
