// Package data loads a model's data set (CSV or synthetic) and serves
// batches by the data stream rule: the stream is the endless concatenation
// of epochs (file order, or one permutation per epoch drawn from the seed),
// and a batch is a contiguous range of stream rows.
package data

import (
	"bufio"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/tensor"
)

// Set is a data set held in memory, one row per example.
type Set struct {
	Rows     int
	Features []float32 // Rows x NF, normalized
	NF       int
	Labels   []int32
	IDs      []int32 // Rows x NI
	NI       int
	spec     *dsl.Data
}

// Load reads the data source of a model. Errors name the file and row.
func Load(spec *dsl.Data) (*Set, error) {
	var s *Set
	var err error
	if spec.Synthetic != nil {
		s = synthetic(spec)
	} else {
		s, err = readCSV(spec)
		if err != nil {
			return nil, err
		}
	}
	s.spec = spec
	normalize(s, spec.Normalize)
	return s, nil
}

func readCSV(spec *dsl.Data) (*Set, error) {
	f, err := os.Open(spec.CSV)
	if err != nil {
		return nil, fmt.Errorf("%s: cannot open data file: %w", spec.CSV, err)
	}
	defer f.Close()
	s := &Set{}
	if c := spec.Features; c != nil {
		s.NF = c.Hi - c.Lo
	}
	if c := spec.IDs; c != nil {
		s.NI = c.Hi - c.Lo
	}
	need := 0
	for _, c := range []*dsl.Column{spec.Features, spec.Label, spec.IDs} {
		if c != nil {
			need = max(need, c.Hi)
		}
	}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<26)
	row, width := 0, -1
	var fields []string
	for sc.Scan() {
		row++
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		fields = splitComma(line, fields[:0])
		at := func(format string, args ...any) error {
			return fmt.Errorf("%s:%d: %s", spec.CSV, row, fmt.Sprintf(format, args...))
		}
		if width < 0 {
			width = len(fields)
			if need > width {
				return nil, at("the model reads column %d but rows have %d columns (0 to %d): check the column ranges in data (%s)", need-1, width, width-1, spec.Pos)
			}
		} else if len(fields) != width {
			return nil, at("row has %d columns, earlier rows have %d (ragged CSV; data at %s)", len(fields), width, spec.Pos)
		}
		num := func(col int) (float64, error) {
			v, err := strconv.ParseFloat(strings.TrimSpace(fields[col]), 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				return 0, at("column %d: %q is not a number (the file must have no header and numeric fields; data at %s)", col, fields[col], spec.Pos)
			}
			return v, nil
		}
		if c := spec.Features; c != nil {
			for col := c.Lo; col < c.Hi; col++ {
				v, err := num(col)
				if err != nil {
					return nil, err
				}
				s.Features = append(s.Features, float32(v))
			}
		}
		for _, c := range []*dsl.Column{spec.Label, spec.IDs} {
			if c == nil {
				continue
			}
			for col := c.Lo; col < c.Hi; col++ {
				v, err := num(col)
				if err != nil {
					return nil, err
				}
				if v != math.Trunc(v) || v < 0 || v > math.MaxInt32 {
					return nil, at("column %d: %q must be a non-negative integer, because it is read as %s %q (%s); fix the row or choose another column", col, fields[col], map[bool]string{true: "label", false: "ids"}[c == spec.Label], c.Name, c.Pos)
				}
				if c == spec.Label {
					s.Labels = append(s.Labels, int32(v))
				} else {
					s.IDs = append(s.IDs, int32(v))
				}
			}
		}
		s.Rows++
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s:%d: %w", spec.CSV, row+1, err)
	}
	if s.Rows == 0 {
		return nil, fmt.Errorf("%s: the data file has no rows", spec.CSV)
	}
	return s, nil
}

func splitComma(line string, out []string) []string {
	for {
		i := strings.IndexByte(line, ',')
		if i < 0 {
			return append(out, line)
		}
		out = append(out, line[:i])
		line = line[i+1:]
	}
}

// synthetic builds a learnable classification task: one random centre per
// class, rows drawn around their class centre with unit noise.
func synthetic(spec *dsl.Data) *Set {
	sy := spec.Synthetic
	r := rand.New(rand.NewPCG(sy.Seed, 0x5eed))
	centres := make([]float64, sy.Classes*sy.Features)
	for i := range centres {
		centres[i] = 2 * r.NormFloat64()
	}
	s := &Set{Rows: sy.Rows, NF: sy.Features, Features: make([]float32, sy.Rows*sy.Features), Labels: make([]int32, sy.Rows)}
	for i := 0; i < sy.Rows; i++ {
		c := r.IntN(sy.Classes)
		s.Labels[i] = int32(c)
		for j := 0; j < sy.Features; j++ {
			s.Features[i*sy.Features+j] = float32(centres[c*sy.Features+j] + r.NormFloat64())
		}
	}
	if spec.Features == nil {
		s.Features, s.NF = nil, 0
	}
	return s
}

func normalize(s *Set, mode string) {
	if s.NF == 0 || mode == "" || mode == "none" {
		return
	}
	for j := 0; j < s.NF; j++ {
		var a, b float64 // standard: mean, std; minmax: min, range
		switch mode {
		case "standard":
			var sum, sq float64
			for i := 0; i < s.Rows; i++ {
				v := float64(s.Features[i*s.NF+j])
				sum += v
				sq += v * v
			}
			a = sum / float64(s.Rows)
			b = math.Sqrt(math.Max(sq/float64(s.Rows)-a*a, 0))
		case "minmax":
			lo, hi := math.Inf(1), math.Inf(-1)
			for i := 0; i < s.Rows; i++ {
				v := float64(s.Features[i*s.NF+j])
				lo, hi = math.Min(lo, v), math.Max(hi, v)
			}
			a, b = lo, hi-lo
		}
		if b < 1e-12 {
			b = 1
		}
		for i := 0; i < s.Rows; i++ {
			p := &s.Features[i*s.NF+j]
			*p = float32((float64(*p) - a) / b)
		}
	}
}

// Stream serves batches by the data stream rule. It is not safe for
// concurrent use; each node has its own.
type Stream struct {
	set   *Set
	perm  []int
	epoch int64
}

// NewStream starts a stream over s.
func NewStream(s *Set) *Stream {
	st := &Stream{set: s, epoch: -1}
	if s.spec != nil && s.spec.Shuffle {
		st.perm = make([]int, s.Rows)
	}
	return st
}

// row maps a stream position to a data set row.
func (st *Stream) row(pos int64) int {
	n := int64(st.set.Rows)
	e, i := pos/n, int(pos%n)
	if st.perm == nil {
		return i
	}
	if e != st.epoch {
		st.epoch = e
		r := rand.New(rand.NewPCG(st.set.spec.Seed, uint64(e)))
		for k := range st.perm {
			st.perm[k] = k
		}
		r.Shuffle(len(st.perm), func(a, b int) { st.perm[a], st.perm[b] = st.perm[b], st.perm[a] })
	}
	return st.perm[i]
}

// Fill writes stream rows [start, start+batch) into the data tensors that
// are non-nil. batch is the tensors' first dimension.
func (st *Stream) Fill(start int64, features, labels, ids *tensor.Tensor) {
	s := st.set
	batch := 0
	for _, t := range []*tensor.Tensor{features, labels, ids} {
		if t != nil {
			batch = t.Shape[0]
			break
		}
	}
	for b := 0; b < batch; b++ {
		r := st.row(start + int64(b))
		if features != nil {
			copy(features.F[b*s.NF:(b+1)*s.NF], s.Features[r*s.NF:(r+1)*s.NF])
		}
		if labels != nil {
			labels.I[b] = s.Labels[r]
		}
		if ids != nil {
			copy(ids.I[b*s.NI:(b+1)*s.NI], s.IDs[r*s.NI:(r+1)*s.NI])
		}
	}
}

// NewOrderedStream is a stream in file order, whatever the shuffle setting:
// evaluation reads the data set once, row by row.
func NewOrderedStream(s *Set) *Stream { return &Stream{set: s, epoch: -1} }
