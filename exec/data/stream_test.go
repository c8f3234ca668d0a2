package data

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data/criteo"
	"github.com/psgraph/psgraph/exec/tensor"
)

// batch holds the data tensors of one batch, one per data variable in
// data order (all); features, labels and ids are the first of each kind,
// nil for none.
type batch struct {
	features, labels, ids *tensor.Tensor
	all                   []*tensor.Tensor
}

func newBatch(spec *dsl.Data, rows int) batch {
	var b batch
	for _, c := range spec.Features {
		b.all = append(b.all, tensor.New(tensor.F32, tensor.Shape{rows, c.Width()}))
	}
	if len(spec.Features) > 0 {
		b.features = b.all[0]
	}
	if c := spec.Label; c != nil && c.Float {
		b.labels = tensor.New(tensor.F32, tensor.Shape{rows, len(c.Cols)})
	} else if c != nil {
		b.labels = tensor.New(tensor.I32, tensor.Shape{rows})
	}
	if b.labels != nil {
		b.all = append(b.all, b.labels)
	}
	for i, c := range spec.IDs {
		b.all = append(b.all, tensor.New(c.IDType(), tensor.Shape{rows, c.Width()}))
		if i == 0 {
			b.ids = b.all[len(b.all)-1]
		}
	}
	return b
}

func (b batch) set(rows int) *Set {
	s := &Set{Rows: rows}
	if b.features != nil {
		s.Features, s.NF = b.features.F, b.features.Shape[1]
	}
	if b.labels != nil && b.labels.DType == tensor.F32 {
		s.Targets, s.NT = b.labels.F, b.labels.Shape[1]
	} else if b.labels != nil {
		s.Labels = b.labels.I
	}
	if b.ids != nil {
		s.IDs, s.NI = b.ids.I, b.ids.Shape[1]
	}
	return s
}

func (b batch) equal(o batch) bool {
	for i, t := range b.all {
		if !slices.Equal(t.F, o.all[i].F) || !slices.Equal(t.I, o.all[i].I) {
			return false
		}
	}
	return true
}

// criteoFile generates rows of the Criteo format, with a blank line and
// a CRLF line end mixed in when messy is set.
func criteoFile(t testing.TB, rows int64, seed uint64, messy bool) string {
	t.Helper()
	var buf bytes.Buffer
	if _, err := criteo.Generate(&buf, criteo.Options{Rows: rows, Seed: seed, Vocab: 50}); err != nil {
		t.Fatal(err)
	}
	s := buf.String()
	if messy {
		s = strings.Replace(s, "\n", "\r\n", 1)
		i := strings.Index(s[len(s)/2:], "\n") + len(s)/2
		s = s[:i+1] + "\n  \n" + s[i+1:]
		s = strings.TrimSuffix(s, "\n") // the last line has no newline
	}
	return s
}

const criteoSpec = `  delimiter: tab
  label: {name: y, column: 0}
  features: {name: dense, columns: [1, 14], fill: 0, transform: log}
  ids: {name: cat, columns: [14, 40], hash_buckets: 1000}
`

// A FileStream serves exactly the batches the in-memory stream serves, by
// the data stream rule: for 1 to 3 trainers each reading its rows of every
// step, over several epochs (batches spanning the end of the file and
// batches larger than the file), with each normalization, with a read
// buffer shorter than a line, and for a trainer that starts late (a
// resumed job) or goes back.
func TestFileStreamEqualsMemory(t *testing.T) {
	const rows = 157
	content := criteoFile(t, rows, 3, true)
	for _, norm := range []string{"none", "standard", "minmax"} {
		g := loadModel(t, "train.tsv", content, criteoSpec+"  normalize: "+norm+"\n")
		set, err := Load(g.Data)
		if err != nil {
			t.Fatal(err)
		}
		if set.Rows != rows {
			t.Fatalf("loaded %d rows, want %d", set.Rows, rows)
		}
		for _, c := range []struct{ trainers, batch, first, buffer int }{
			{1, 7, 0, StreamBuffer}, {2, 7, 0, StreamBuffer}, {3, 7, 0, 64}, {2, 200, 0, StreamBuffer}, {3, 5, 40, 128}, {2, 16, 1000, StreamBuffer},
		} {
			t.Run(fmt.Sprintf("%s/trainers%d/batch%d/from%d/buf%d", norm, c.trainers, c.batch, c.first, c.buffer), func(t *testing.T) {
				mem := NewStream(set)
				for tr := 0; tr < c.trainers; tr++ {
					fs, err := openStream(g.Data, c.buffer, nil, nil)
					if err != nil {
						t.Fatal(err)
					}
					defer fs.Close()
					want, got := newBatch(g.Data, c.batch), newBatch(g.Data, c.batch)
					steps := 3*rows/(c.trainers*c.batch) + 2 // three epochs and more
					for k := c.first; k < c.first+steps; k++ {
						start := int64(k*c.trainers*c.batch + tr*c.batch)
						mem.Fill(start, want.all)
						if err := fs.Fill(start, got.all); err != nil {
							t.Fatal(err)
						}
						if !got.equal(want) {
							t.Fatalf("trainer %d step %d (rows %d..): streamed batch differs from the in-memory one", tr, k, start)
						}
					}
					if fs.Rows() != rows {
						t.Errorf("stream counted %d rows, want %d", fs.Rows(), rows)
					}
					// Back to an earlier step, as a second run over the same stream would.
					start := int64(c.first*c.trainers*c.batch + tr*c.batch + 3)
					mem.Fill(start, want.all)
					if err := fs.Fill(start, got.all); err != nil || !got.equal(want) {
						t.Fatalf("going back to row %d: err %v, equal %t", start, err, got.equal(want))
					}
				}
			})
		}
		// One epoch in order, in chunks, is the whole set.
		fs, err := openStream(g.Data, 100, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		b := newBatch(g.Data, 50)
		var chunks []int
		var feats []float32
		var ids []int32
		err = fs.Epoch(b.all, func(n int) error {
			chunks = append(chunks, n)
			feats = append(feats, b.features.F[:n*13]...)
			ids = append(ids, b.ids.I[:n*26]...)
			return nil
		})
		fs.Close()
		if err != nil || !slices.Equal(chunks, []int{50, 50, 50, 7}) || !slices.Equal(feats, set.Features) || !slices.Equal(ids, set.IDs) {
			t.Errorf("%s: Epoch: err %v, chunks %v (want [50 50 50 7]), rows equal to the loaded set: %t", norm, err, chunks, slices.Equal(feats, set.Features) && slices.Equal(ids, set.IDs))
		}
	}
}

// A stream's memory does not grow with its file: reading a generated file
// of 60 times the read buffer over and over, as the second of two
// trainers, allocates nothing once started, and the heap stays far below
// the file's size (the in-memory set of the same file takes more than the
// whole budget).
func TestFileStreamMemoryIsBounded(t *testing.T) {
	const buffer = 64 << 10
	const rows = 20000
	path := filepath.Join(t.TempDir(), "big.tsv")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := criteo.Generate(f, criteo.Options{Rows: rows, Seed: 5}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	st, _ := os.Stat(path)
	if st.Size() < 60*buffer {
		t.Fatalf("the file is only %d bytes; the test needs one much larger than the %d-byte buffer", st.Size(), buffer)
	}
	spec := criteoSpecFor(t, path)
	fs, err := openStream(spec, buffer, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	const b, trainers = 64, 2
	bt := newBatch(spec, b)
	fill := func(k int) {
		if err := fs.Fill(int64(k*trainers*b+b), bt.all); err != nil {
			t.Fatal(err)
		}
	}
	fill(0)
	steps := 3 * rows / (trainers * b) // three passes over the file
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for k := 1; k <= steps; k++ {
		fill(k)
	}
	runtime.ReadMemStats(&after)
	read := int64(3) * st.Size()
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<10 {
		t.Errorf("reading %d MiB of file allocated %d bytes; a stream must not allocate per row", read>>20, grew)
	}
	if fs.Rows() != rows {
		t.Errorf("the stream counted %d rows, want %d", fs.Rows(), rows)
	}
	if allocs := testing.AllocsPerRun(100, func() { fill(steps + 1) }); allocs != 0 {
		t.Errorf("Fill allocates %.1f times per batch, want 0", allocs)
	}
	// What the stream holds: its buffer, a row of scratch, its parser.
	held := heldBy(fs.src) + int64(4*(len(fs.row)+len(fs.ids)))
	if held > 2*buffer {
		t.Errorf("the stream holds %d bytes, more than twice its %d-byte buffer", held, buffer)
	}
	// The same file in memory holds every row: 40 values of 4 bytes each.
	set, err := Load(spec)
	if err != nil {
		t.Fatal(err)
	}
	if inMem := int64(4 * (len(set.Features) + len(set.Labels) + len(set.IDs))); inMem < 20*held {
		t.Errorf("in memory %d bytes, streamed %d: the test file is too small to tell them apart", inMem, held)
	}
}

func criteoSpecFor(t *testing.T, path string) *dsl.Data {
	t.Helper()
	src := "psgraph: 1\ndata:\n  csv: " + path + "\n" + criteoSpec + "  stream: true\n"
	g, err := dsl.LoadBytes(filepath.Join(t.TempDir(), "m.yaml"), []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return g.Data
}

// Count checks and counts every row of a streamed file without loading it.
func TestCount(t *testing.T) {
	g := loadModel(t, "train.tsv", criteoFile(t, 33, 1, true), criteoSpec+"  stream: true\n")
	if n, _, err := Count(g.Data); err != nil || n != 33 {
		t.Fatalf("Count = %d, %v; want 33 rows", n, err)
	}
	bad := loadModel(t, "train.tsv", criteoFile(t, 33, 1, false)+"1\t2\n", criteoSpec+"  stream: true\n")
	if _, _, err := Count(bad.Data); err == nil || !strings.Contains(err.Error(), "train.tsv:34: line has 2 fields") {
		t.Fatalf("Count of a file with a short last line: %v", err)
	}
}

// BenchmarkCriteoParse reads a generated Criteo file through a stream:
// rows/s and MB/s of the parser. "read" hashes the 26 categorical columns
// into int32 ids (hash_buckets), "read64" into 64-bit keys (key: hash64).
func BenchmarkCriteoParse(b *testing.B) {
	spec64 := strings.Replace(criteoSpec, "hash_buckets: 1000}", "key: hash64}", 1)
	for _, bc := range []struct {
		name string
		skip int // rows of other trainers between batches
		spec string
	}{{"read", 0, criteoSpec}, {"read1of4", 3, criteoSpec}, {"read64", 0, spec64}} {
		b.Run(bc.name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "bench.tsv")
			f, _ := os.Create(path)
			const rows = 200000
			if _, err := criteo.Generate(f, criteo.Options{Rows: rows, Seed: 1}); err != nil {
				b.Fatal(err)
			}
			f.Close()
			st, _ := os.Stat(path)
			src := "psgraph: 1\ndata:\n  csv: " + path + "\n" + bc.spec + "  stream: true\n"
			g, err := dsl.LoadBytes(filepath.Join(b.TempDir(), "m.yaml"), []byte(src))
			if err != nil {
				b.Fatal(err)
			}
			fs, err := OpenStream(g.Data)
			if err != nil {
				b.Fatal(err)
			}
			defer fs.Close()
			const batch = 256
			bt := newBatch(g.Data, batch)
			b.ReportAllocs()
			b.ResetTimer()
			for k := 0; k < b.N; k++ {
				if err := fs.Fill(int64(k*(bc.skip+1)*batch), bt.all); err != nil {
					b.Fatal(err)
				}
			}
			perRow := b.Elapsed().Seconds() / float64(b.N*batch)
			b.ReportMetric(1/perRow, "rows/s")
			b.ReportMetric(float64(st.Size())/rows*float64(bc.skip+1)/perRow/1e6, "file_MB/s")
		})
	}
}

// BenchmarkCriteoParseSpecs reads a generated Criteo file through data
// specs of other shapes: "tables26", one hashed ids spec per categorical
// column (a table per feature, as DLRM has); "history", the one spec of
// the 26 columns plus a multi-valued history column of up to 20 ids
// (gen --history 20).
func BenchmarkCriteoParseSpecs(b *testing.B) {
	var tables strings.Builder
	tables.WriteString("  delimiter: tab\n  label: {name: y, column: 0}\n  features: {name: dense, columns: [1, 14], fill: 0, transform: log}\n  ids:\n")
	for c := 14; c < 40; c++ {
		fmt.Fprintf(&tables, "    - {name: c%d, column: %d, hash_buckets: %d}\n", c, c, 1000+c)
	}
	history := strings.Replace(criteoSpec, "  ids: {name: cat, columns: [14, 40], hash_buckets: 1000}\n",
		"  ids:\n    - {name: cat, columns: [14, 40], hash_buckets: 1000}\n    - {name: hist, column: 40, separator: \"|\", max_len: 20, hash_buckets: 1000, shared_space: true}\n", 1)
	for _, bc := range []struct {
		name, spec string
		history    int
	}{{"tables26", tables.String(), 0}, {"history", history, 20}} {
		b.Run(bc.name, func(b *testing.B) {
			path := filepath.Join(b.TempDir(), "bench.tsv")
			f, _ := os.Create(path)
			const rows = 200000
			if _, err := criteo.Generate(f, criteo.Options{Rows: rows, Seed: 1, History: bc.history}); err != nil {
				b.Fatal(err)
			}
			f.Close()
			st, _ := os.Stat(path)
			src := "psgraph: 1\ndata:\n  csv: " + path + "\n" + bc.spec + "  stream: true\n"
			g, err := dsl.LoadBytes(filepath.Join(b.TempDir(), "m.yaml"), []byte(src))
			if err != nil {
				b.Fatal(err)
			}
			fs, err := OpenStream(g.Data)
			if err != nil {
				b.Fatal(err)
			}
			defer fs.Close()
			const batch = 256
			bt := newBatch(g.Data, batch)
			b.ReportAllocs()
			b.ResetTimer()
			for k := 0; k < b.N; k++ {
				if err := fs.Fill(int64(k*batch), bt.all); err != nil {
					b.Fatal(err)
				}
			}
			perRow := b.Elapsed().Seconds() / float64(b.N*batch)
			b.ReportMetric(1/perRow, "rows/s")
			b.ReportMetric(float64(st.Size())/rows/perRow/1e6, "file_MB/s")
		})
	}
}
