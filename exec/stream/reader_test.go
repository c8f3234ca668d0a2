package stream

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/tensor"
)

// spec is the data section of a model reading rows "label,a,b" from an
// online source, with extra data keys.
func spec(t *testing.T, extra string) *dsl.Data {
	t.Helper()
	src := fmt.Sprintf(`psgraph: 1
data:
  csv: "-"
  label: {name: y, column: 0}
  features: {name: x, columns: [1, 3]}
%s
params:
  W: {shape: [2, 2]}
ops:
  - {type: matmul, inputs: [x, W], outputs: [z]}
  - {type: softmax_cross_entropy, inputs: [z, y], outputs: [loss]}
train: {loss: loss, batch: 4, steps: 1, optimizer: {type: sgd, lr: 0.1}}
`, extra)
	g, err := dsl.Parse("m.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return g.Data
}

func parserOf(d *dsl.Data) func(func() string) *data.OnlineParser {
	return func(where func() string) *data.OnlineParser { return data.NewOnlineParser(d, where) }
}

func dst(batch int) []*tensor.Tensor {
	return []*tensor.Tensor{tensor.New(tensor.F32, tensor.Shape{batch, 2}), tensor.New(tensor.I32, tensor.Shape{batch})}
}

// row is the test row of partition p, offset o: its label and features
// name it, so a batch shows which rows it holds.
func row(p, o int) string { return fmt.Sprintf("%d,%d,%d", (p+o)%2, p, o) }

// batchRows reads n batches and returns their rows as (partition, offset)
// pairs and each batch's position.
func readBatches(t *testing.T, r *Reader, n, batch int) ([][2]int, []*Position) {
	t.Helper()
	var got [][2]int
	var pos []*Position
	d := dst(batch)
	for range n {
		if err := r.Fill(nil, d); err != nil {
			t.Fatal(err)
		}
		for b := range batch {
			got = append(got, [2]int{int(d[0].F[2*b]), int(d[0].F[2*b+1])})
		}
		pos = append(pos, r.Position().Clone())
	}
	return got, pos
}

// The batches depend only on what the partitions hold, not on when it
// arrived: rows appended in random pieces, one partition far ahead of
// another, give the batches of rows appended all at once, round robin
// over the partitions by offset; and a reader opened at the position
// after any batch gives the batches after it.
func TestReaderBatchesIndependentOfArrival(t *testing.T) {
	const parts, perPart, batch = 3, 40, 4
	d := spec(t, "")
	read := func(m *Memory, at *Position, n int) ([][2]int, []*Position) {
		src, err := m.Open(at)
		if err != nil {
			t.Fatal(err)
		}
		r, err := NewReader(src, at, parserOf(d), ReaderOptions{Batch: batch})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		return readBatches(t, r, n, batch)
	}
	whole := NewMemory(KindKafka, parts)
	for p := range parts {
		for o := range perPart {
			whole.Append(p, row(p, o))
		}
	}
	n := parts * perPart / batch
	want, wantPos := read(whole, whole.Start(), n)
	for i, g := range want { // round robin by offset
		if g != [2]int{i % parts, i / parts} {
			t.Fatalf("row %d of the stream is partition %d offset %d, want %d %d", i, g[0], g[1], i%parts, i/parts)
		}
	}
	for seed := range uint64(5) {
		m := NewMemory(KindKafka, parts)
		go func() { // pieces of random size, partitions in random order
			r := rand.New(rand.NewPCG(seed, 1))
			next := make([]int, parts)
			for slices.Min(next) < perPart {
				p := r.IntN(parts)
				k := min(r.IntN(7), perPart-next[p])
				for range k {
					m.Append(p, row(p, next[p]))
					next[p]++
				}
				if r.IntN(3) == 0 {
					time.Sleep(time.Duration(r.IntN(200)) * time.Microsecond) // arrival timing is what the test varies
				}
			}
		}()
		got, gotPos := read(m, m.Start(), n)
		if !slices.Equal(got, want) {
			t.Fatalf("seed %d: the batches depend on the arrival order:\n got %v\nwant %v", seed, got, want)
		}
		for k := range gotPos {
			if gotPos[k].Marshal() != wantPos[k].Marshal() {
				t.Fatalf("seed %d: position after batch %d is %s, want %s", seed, k, gotPos[k].Marshal(), wantPos[k].Marshal())
			}
		}
	}
	for k := range n - 1 { // resume after batch k
		at, err := ParsePosition(wantPos[k].Marshal())
		if err != nil {
			t.Fatal(err)
		}
		got, _ := read(whole, at, n-k-1)
		if !slices.Equal(got, want[(k+1)*batch:]) {
			t.Fatalf("opened at the position after batch %d: got %v, want %v", k, got, want[(k+1)*batch:])
		}
	}
}

// The position a reader reports is that of the batches Fill returned,
// not of the rows it read ahead.
func TestReaderPositionIsOfTrainedRows(t *testing.T) {
	d := spec(t, "")
	m := NewMemory(KindKafka, 2)
	for o := range 100 {
		m.Append(0, row(0, o))
		m.Append(1, row(1, o))
	}
	src, _ := m.Open(m.Start())
	r, err := NewReader(src, m.Start(), parserOf(d), ReaderOptions{Batch: 4, Ahead: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	dd := dst(4)
	if err := r.Fill(nil, dd); err != nil {
		t.Fatal(err)
	}
	// Wait until the reader is far ahead: all its batches are full.
	deadline := time.Now().Add(10 * time.Second)
	for len(r.full) < 7 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if len(r.full) < 7 {
		t.Fatalf("the reader did not read ahead: %d batches ready", len(r.full))
	}
	if p := r.Position(); p.Records != 4 || !slices.Equal(p.Offsets, []int64{2, 2}) || p.Turn != 0 {
		t.Errorf("after one batch of 4 the position is %s (records %d), want offsets [2 2], 4 records", p.Marshal(), p.Records)
	}
	if lag, ok := r.Lag(); !ok || lag != 196 {
		t.Errorf("lag %d %v, want 196 rows after the trained ones", lag, ok)
	}
}

// A bad row is named by where it is; on_bad_row: skip counts it, moves
// past it and fills the batch with the next good rows.
func TestReaderBadRows(t *testing.T) {
	rows := []string{"0,1,1", "1,2,2", "x,3,3", "0,4,4", "", "1,5", "0,6,6", "1,7,7", "0,8,8"}
	for _, skip := range []bool{false, true} {
		m := NewMemory(KindFile, 1)
		m.Append(0, rows...)
		m.End()
		src, _ := m.Open(m.Start())
		r, err := NewReader(src, m.Start(), parserOf(spec(t, "")), ReaderOptions{Batch: 4, SkipBad: skip})
		if err != nil {
			t.Fatal(err)
		}
		dd := dst(4)
		err = r.Fill(nil, dd)
		if !skip {
			if err == nil || !strings.Contains(err.Error(), "memory:3: column 0") || !strings.Contains(err.Error(), "on_bad_row: skip") {
				t.Errorf("want the bad row's line named, got %v", err)
			}
			r.Close()
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var got []float32
		for b := range 4 {
			got = append(got, dd[0].F[2*b])
		}
		if !slices.Equal(got, []float32{1, 2, 4, 6}) {
			t.Errorf("batch rows %v, want 1 2 4 6 (rows 3 and 6 bad, 5 blank)", got)
		}
		if p := r.Position(); p.Bad != 2 || p.Records != 7 || p.Line != 7 {
			t.Errorf("position %s, want 7 records, 2 bad, line 7", p.Marshal())
		}
		if err := r.Fill(nil, dd); err != io.EOF {
			t.Errorf("after the last whole batch: %v, want io.EOF", err)
		}
		r.Close()
	}
}

// normalize_rows: the stream is normalized with the statistics of its
// first rows, those rows included.
func TestReaderNormalizesWithFirstRows(t *testing.T) {
	d := spec(t, "  normalize: standard\n  normalize_rows: 6")
	m := NewMemory(KindFile, 1)
	var xs [][2]float64
	for i := range 12 {
		a, b := float64(i*i), float64(3*i+1)
		xs = append(xs, [2]float64{a, b})
		m.Append(0, fmt.Sprintf("%d,%g,%g", i%2, a, b))
	}
	m.End()
	src, _ := m.Open(m.Start())
	r, err := NewReader(src, m.Start(), parserOf(d), ReaderOptions{Batch: 4, NormalizeRows: 6, Normalize: "standard"})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	var mean, sd [2]float64
	for j := range 2 {
		for _, x := range xs[:6] {
			mean[j] += x[j] / 6
		}
		for _, x := range xs[:6] {
			sd[j] += (x[j] - mean[j]) * (x[j] - mean[j]) / 6
		}
		sd[j] = math.Sqrt(sd[j])
	}
	dd := dst(4)
	for k := range 3 {
		if err := r.Fill(nil, dd); err != nil {
			t.Fatal(err)
		}
		for b := range 4 {
			for j := range 2 {
				want := float32((xs[4*k+b][j] - mean[j]) / sd[j])
				if got := dd[0].F[2*b+j]; math.Abs(float64(got-want)) > 1e-5 {
					t.Fatalf("row %d feature %d: %v, want %v", 4*k+b, j, got, want)
				}
			}
		}
	}
}

// A reader of several trainers over a file takes its own chunks of
// records: together the trainers read every row once.
func TestReaderStridesFileChunks(t *testing.T) {
	d := spec(t, "")
	m := NewMemory(KindFile, 1)
	for i := range 48 {
		m.Append(0, row(0, i))
	}
	m.End()
	seen := map[int]int{}
	for tr := range 3 {
		src, _ := m.Open(m.Start())
		r, err := NewReader(src, m.Start(), parserOf(d), ReaderOptions{Batch: 4, Trainer: tr, Trainers: 3})
		if err != nil {
			t.Fatal(err)
		}
		got, _ := readBatches(t, r, 4, 4)
		for i, g := range got {
			if want := (i/4)*12 + tr*4 + i%4; g[1] != want {
				t.Fatalf("trainer %d row %d is %d, want %d", tr, i, g[1], want)
			}
			seen[g[1]]++
		}
		if err := r.Fill(nil, dst(4)); err != io.EOF {
			t.Errorf("trainer %d after its last batch: %v, want io.EOF", tr, err)
		}
		r.Close()
	}
	if len(seen) != 48 {
		t.Errorf("the trainers read %d distinct rows of 48", len(seen))
	}
}

// Fill waiting for rows returns ErrStopped when the run is asked to stop.
func TestReaderStops(t *testing.T) {
	m := NewMemory(KindKafka, 1)
	src, _ := m.Open(m.Start())
	r, err := NewReader(src, m.Start(), parserOf(spec(t, "")), ReaderOptions{Batch: 4})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	done := make(chan error)
	go func() { done <- r.Fill(stop, dst(4)) }()
	m.Append(0, row(0, 0))
	close(stop)
	if err := <-done; !errors.Is(err, ErrStopped) {
		t.Errorf("Fill: %v, want ErrStopped", err)
	}
	r.Close()
}

// A followed file is read as it grows, a line whose end has not arrived
// waiting for it; a source opened at a position goes on after it.
func TestFollowedFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "rows.csv")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx := context.Background()
	src, err := OpenFile(ctx, path, &Position{Kind: KindFile}, FileOptions{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var pos Position
	pos.Kind = KindFile
	next := func() {
		t.Helper()
		rec, err := src.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(rec.Value))
		pos.advance(rec)
	}
	f.WriteString("a,1\nb,")
	next()
	go func() { f.WriteString("2\r\nc,3\n") }()
	next()
	next()
	if !slices.Equal(got, []string{"a,1", "b,2", "c,3"}) {
		t.Fatalf("rows %q", got)
	}
	if pos.Byte != 13 || pos.Line != 3 || pos.File != path {
		t.Errorf("position %s, want byte 13 line 3", pos.Marshal())
	}
	src.Close()
	f.WriteString("d,4\n")
	src, err = OpenFile(ctx, path, pos.Clone(), FileOptions{Follow: true})
	if err != nil {
		t.Fatal(err)
	}
	next()
	if got[3] != "d,4" || pos.Line != 4 {
		t.Errorf("resumed: %q at line %d, want d,4 at line 4", got[3], pos.Line)
	}
	if err := os.Truncate(path, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := src.Next(ctx); err == nil || !strings.Contains(err.Error(), "was cut to 3 bytes") {
		t.Errorf("a truncated followed file: %v", err)
	}
	src.Close()
}

// A directory's parts are read in name order, each whole (a last line
// without its newline included) once a later part exists; hidden and
// underscore files are not parts; not followed, the source ends after
// the last part.
func TestDirectoryParts(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("part-01", "a\nb")
	write("_SUCCESS", "")
	write(".part-02.tmp", "x\n")
	ctx := context.Background()
	for _, follow := range []bool{false, true} {
		src, err := OpenFile(ctx, dir, &Position{Kind: KindDir}, FileOptions{Follow: follow})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		var pos = Position{Kind: KindDir}
		read := func(n int) {
			for range n {
				rec, err := src.Next(ctx)
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, src.Where(rec)[len(dir)+1:]+"="+string(rec.Value))
				pos.advance(rec)
			}
		}
		if !follow {
			write("part-00", "z\n")
			read(3)
			if _, err := src.Next(ctx); err != io.EOF {
				t.Errorf("not followed, after the last part: %v, want io.EOF", err)
			}
			if !slices.Equal(got, []string{"part-00:1=z", "part-01:1=a", "part-01:2=b"}) {
				t.Errorf("rows %q", got)
			}
			src.Close()
			continue
		}
		read(2)
		go os.WriteFile(filepath.Join(dir, "part-03"), []byte("c\n"), 0o644)
		read(2)
		if !slices.Equal(got, []string{"part-00:1=z", "part-01:1=a", "part-01:2=b", "part-03:1=c"}) {
			t.Errorf("followed: rows %q", got)
		}
		src.Close()
		write("part-04", "d\n")
		src, err = OpenFile(ctx, dir, pos.Clone(), FileOptions{Follow: true})
		if err != nil {
			t.Fatal(err)
		}
		got = got[:0]
		read(1)
		if !slices.Equal(got, []string{"part-04:1=d"}) {
			t.Errorf("resumed at %s: rows %q", pos.Marshal(), got)
		}
		src.Close()
	}
}

// Standard input resumes by reading the same input again and skipping
// the bytes the position covers, which must be the bytes read before.
func TestStdinResume(t *testing.T) {
	ctx := context.Background()
	in := "1,1\n2,2\n3,3\n4,4"
	src, _ := OpenFile(ctx, "-", &Position{Kind: KindStdin}, FileOptions{Stdin: strings.NewReader(in)})
	pos := Position{Kind: KindStdin}
	for range 2 {
		rec, err := src.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		pos.advance(rec)
	}
	src, err := OpenFile(ctx, "-", pos.Clone(), FileOptions{Stdin: strings.NewReader(in)})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		rec, err := src.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%d:%s", rec.Off, rec.Value))
	}
	if !slices.Equal(got, []string{"3:3,3", "4:4,4"}) {
		t.Errorf("resumed rows %q", got)
	}
	for _, other := range []string{"1,1\n2,3\n3,3\n", "1,1\n"} {
		if _, err := OpenFile(ctx, "-", pos.Clone(), FileOptions{Stdin: strings.NewReader(other)}); err == nil || !strings.Contains(err.Error(), "same input from its start") {
			t.Errorf("resumed on another input %q: %v", other, err)
		}
	}
}

// Ready waits for the next batch without taking it: a run that then
// decides not to train it (a job stopping at its agreed step) leaves the
// position of the trained rows where it was, and the next Fill takes the
// batch Ready saw. Stopped before a batch is there, Ready says so and
// leaves nothing behind; at the source's end it says io.EOF.
func TestReaderReadyTakesNothing(t *testing.T) {
	const batch = 4
	d := spec(t, "")
	m := NewMemory(KindKafka, 2)
	for o := range 4 {
		m.Append(0, row(0, o))
		m.Append(1, row(1, o))
	}
	src, err := m.Open(m.Start())
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReader(src, m.Start(), parserOf(d), ReaderOptions{Batch: batch})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	ts := dst(batch)
	for range 3 { // ready again and again: still the first batch
		if err := r.Ready(nil, ts); err != nil {
			t.Fatal(err)
		}
	}
	if p := r.Position(); p.Records != 0 || !slices.Equal(p.Offsets, []int64{0, 0}) {
		t.Fatalf("after Ready the trained rows' position is %s (%d records), want the start", p, p.Records)
	}
	got, pos := readBatches(t, r, 2, batch)
	for i, g := range got {
		if g != [2]int{i % 2, i / 2} {
			t.Fatalf("row %d is partition %d offset %d, want %d %d", i, g[0], g[1], i%2, i/2)
		}
	}
	if !slices.Equal(pos[1].Offsets, []int64{4, 4}) {
		t.Fatalf("after both batches the position is %s", pos[1])
	}
	stop := make(chan struct{})
	close(stop)
	if err := r.Ready(stop, ts); !errors.Is(err, ErrStopped) {
		t.Fatalf("Ready stopped with no batch there: %v, want ErrStopped", err)
	}
	m.Append(0, row(0, 4), row(0, 5))
	m.Append(1, row(1, 4), row(1, 5))
	m.End()
	if err := r.Ready(nil, ts); err != nil {
		t.Fatal(err)
	}
	if err := r.Fill(stop, ts); err != nil || ts[0].F[0] != 0 || ts[0].F[1] != 4 {
		t.Fatalf("Fill after Ready: %v, first row %v/%v, want partition 0 offset 4", err, ts[0].F[0], ts[0].F[1])
	}
	if err := r.Ready(nil, ts); err != io.EOF {
		t.Fatalf("Ready at the end: %v, want io.EOF", err)
	}
}
