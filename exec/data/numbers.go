package data

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/psgraph/psgraph/dsl"
)

// parseUint64 reads an unsigned decimal integer of the uint64 range.
func parseUint64(b []byte) (uint64, bool) {
	if len(b) > 0 && b[0] == '+' {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	return n, true
}

// integer reads a non-negative int32 of a label or an integer ids field f
// (of column col).
func (p *rowParser) integer(c *dsl.Column, f []byte, col, lineNo int, what string) (int32, error) {
	if len(f) == 0 {
		if c.Fill != nil {
			return int32(*c.Fill), nil
		}
		if what == "label" {
			return 0, p.errAt(lineNo, "%s is empty, but it is the label %q (%s); every row needs a label: fix or drop the line", p.colName(col), c.Name, c.Pos)
		}
		return 0, p.errAt(lineNo, "%s is empty; add fill: ID to %s (%s) to stand in for missing ids, or hash_buckets: N to hash the column's strings", p.colName(col), c.Key(), c.Pos)
	}
	if n, ok := parseInt(f); ok && n >= 0 && n <= math.MaxInt32 {
		return int32(n), nil
	}
	v, ok := parseNumber(f)
	if !ok || v != math.Trunc(v) || v < 0 || v > math.MaxInt32 {
		hint := "fix the row or choose another column"
		switch {
		case what == "label" && !ok:
			hint = fmt.Sprintf("for string labels write positive: %q (the value of the positive class; every other value is 0), or vocab: {min_count: 1} to number the classes", f)
		case what == "label":
			hint = "fix the row, add dtype: float32 to data.label to read float targets (regression), or threshold: X to make values of at least X the positive class"
		case what == "ids" && !ok:
			hint = fmt.Sprintf("add hash_buckets: N or vocab: {min_count: 1} to %s to map strings to ids, or fix the row", c.Key())
		}
		return 0, p.errAt(lineNo, "%s: %q must be a non-negative integer, because it is read as %s %q (%s); %s", p.colName(col), f, what, c.Name, c.Pos, hint)
	}
	return int32(v), nil
}

// parseInt reads an optionally signed decimal integer of at most 18
// digits, the common case of a data field, without strconv's string.
func parseInt(b []byte) (int64, bool) {
	neg := false
	if len(b) > 0 && (b[0] == '-' || b[0] == '+') {
		neg = b[0] == '-'
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}

// parseInt64 reads an optionally signed decimal integer of the int64
// range, -2^63 to 2^63-1.
func parseInt64(b []byte) (int64, bool) {
	if n, ok := parseInt(b); ok {
		return n, true
	}
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
		if len(b) > 0 && b[0] == '+' { // parseUint64 takes a sign of its own
			return 0, false
		}
	}
	n, ok := parseUint64(b)
	switch {
	case ok && neg && n <= 1<<63:
		return int64(-n), true
	case ok && !neg && n < 1<<63:
		return int64(n), true
	}
	return 0, false
}

// parseNumber reads a finite number.
func parseNumber(b []byte) (float64, bool) {
	if n, ok := parseInt(b); ok {
		return float64(n), true
	}
	// A short []byte to string conversion that does not escape is made on
	// the stack; strconv copies its input into errors.
	v, err := strconv.ParseFloat(string(b), 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, false
	}
	return v, true
}
