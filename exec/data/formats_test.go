package data

import (
	stdcsv "encoding/csv"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/exec/data/criteo"
	"github.com/psgraph/psgraph/internal/testfix"
)

func loadSpec(t testing.TB, dir, src string) *dsl.Data {
	t.Helper()
	path := filepath.Join(dir, "m.yaml")
	if err := os.WriteFile(path, []byte("psgraph: 1\ndata:\n"+src), 0o644); err != nil {
		t.Fatal(err)
	}
	g, err := dsl.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return g.Data
}

// readStreamed reads a whole file streamed, in one batch of its rows.
func readStreamed(t testing.TB, spec *dsl.Data, rows int) batch {
	t.Helper()
	fs, err := OpenStream(spec)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	b := newBatch(spec, rows)
	if err := fs.Fill(0, b.all); err != nil {
		t.Fatal(err)
	}
	return b
}

// DeepCTR's Criteo sample as gen_tfrecords.py writes it (sparse features
// label-encoded int64_list, dense ones min-max scaled float_list, the label
// a float_list), by an independent writer, plain and gzipped, reads as the
// CSV it was made from: the same ids and labels, and features equal to
// within float32 rounding (a float_list holds float32; the CSV the float64
// it was rounded from), loaded and streamed.
func TestTFRecordMatchesTheCSVItWasMadeFrom(t *testing.T) {
	dir := t.TempDir()
	testfix.WriteTFRecord(t, "criteo", testfix.DeepCTR(t, dir, "criteo_sample.txt"), dir)
	spec := "  features: {name: dense, columns: I1..I13}\n  ids: {name: cat, columns: C1..C26, num_ids: 100}\n  label: {name: y, column: label, dtype: float32}\n"
	csv := loadSpec(t, dir, "  csv: criteo_encoded.csv\n  header: true\n"+spec)
	want, err := Load(csv)
	if err != nil {
		t.Fatal(err)
	}
	if want.Rows != 200 {
		t.Fatalf("the CSV has %d rows, want 200", want.Rows)
	}
	for _, file := range []string{"criteo.tfrecords", "criteo.tfrecords.gz"} {
		tf := loadSpec(t, dir, "  tfrecord: "+file+"\n"+spec)
		got, err := Load(tf)
		if err != nil {
			t.Fatal(err)
		}
		if got.Rows != want.Rows || !slices.Equal(got.IDs, want.IDs) || !slices.Equal(got.Targets, want.Targets) {
			t.Fatalf("%s: %d rows, ids equal %v, labels equal %v", file, got.Rows, slices.Equal(got.IDs, want.IDs), slices.Equal(got.Targets, want.Targets))
		}
		for i, v := range got.Features {
			if w := want.Features[i]; math.Abs(float64(v-w)) > 1e-7*math.Max(1, math.Abs(float64(w))) {
				t.Fatalf("%s: feature %d is %v, the CSV's %v", file, i, v, w)
			}
		}
		b := readStreamed(t, tf, got.Rows)
		if !slices.Equal(b.features.F, got.Features) || !slices.Equal(b.ids.I, got.IDs) || !slices.Equal(b.labels.F, got.Targets) {
			t.Errorf("%s streamed differs from loaded", file)
		}
	}
}

// A feature of several values (MovieLens genres as a bytes_list) is a
// multi-valued column (max_len), read as the CSV's separated field is;
// int64_list, float_list and bytes_list features by key, hashed and
// mapped by a vocabulary as a CSV's columns are.
func TestTFRecordMultiValuedAndKinds(t *testing.T) {
	dir := t.TempDir()
	testfix.WriteTFRecord(t, "movielens", testfix.DeepCTR(t, dir, "movielens_sample.txt"), dir)
	src, err := os.ReadFile(testfix.DeepCTR(t, dir, "movielens_sample.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "m.csv"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	common := "  features: {name: r, column: rating}\n  label: {name: y, column: rating, threshold: 4}\n"
	csv := loadSpec(t, dir, "  csv: m.csv\n  header: true\n"+common+
		"  ids:\n    - {name: g, column: genres, separator: \"|\", max_len: 4, vocab: {min_count: 1}}\n    - {name: u, column: user_id, key: int64}\n")
	// names: give the keys the CSV's column numbers: the same hash spaces.
	tf := loadSpec(t, dir, "  tfrecord: movielens.tfrecords\n"+common+
		"  ids:\n    - {name: g, column: genres, max_len: 4, vocab: {min_count: 1}}\n    - {name: u, column: user_id, key: int64}\n")
	want, err := Load(csv)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Load(tf)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got.IDs, want.IDs) || !slices.Equal(got.Keys, want.Keys) || !slices.Equal(got.Features, want.Features) || !slices.Equal(got.Labels, want.Labels) {
		t.Errorf("tfrecord ids %v... keys %v..., CSV %v... %v...", got.IDs[:8], got.Keys[:2], want.IDs[:8], want.Keys[:2])
	}
	if got.Rows != 200 || !slices.Contains(got.IDs, -1) {
		t.Errorf("%d rows, want 200 with padded genres", got.Rows)
	}
	recs, err := stdcsv.NewReader(strings.NewReader(string(src))).ReadAll() // an independent CSV reader
	if err != nil {
		t.Fatal(err)
	}
	firstGenres := recs[1][5]
	bad := loadSpec(t, dir, "  tfrecord: movielens.tfrecords\n  ids: {name: g, column: genres, hash_buckets: 10}\n")
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), "movielens.tfrecords: record 1: feature \"genres\" holds "+strconv.Itoa(len(strings.Split(firstGenres, "|")))+" values, and the model reads one value of it a row; read it with an ids spec with max_len") {
		t.Errorf("a list read as one value: got %v", err)
	}
}

// MovieLens written by DuckDB as parquet (integers, strings, a double, a
// list, an unsigned integer and nulls) reads as the CSV it came from, by
// column name: hashed titles in the same hash spaces (the columns keep
// their places), genres split at "|" from a string or taken from a list,
// the rating thresholded, a missing value filled, unsigned integers plain
// and dictionary-encoded as uint64 keys.
func TestParquetMatchesTheCSV(t *testing.T) {
	dir := t.TempDir()
	csvPath := testfix.DeepCTR(t, dir, "movielens_sample.txt")
	testfix.WriteParquet(t, filepath.Join(dir, "m.parquet"), 2048, "SELECT user_id, movie_id, rating, timestamp, title, genres, gender, age, CASE WHEN occupation = 0 THEN NULL ELSE occupation END AS occupation, zip, "+
		"string_split(genres, '|') AS genre_list, CAST(user_id AS UBIGINT) + 18446744073709540000 AS big, CAST(age AS UBIGINT) + 18446744073709540000 AS bigage, CAST(rating AS DOUBLE) / 2 AS half FROM read_csv('"+csvPath+"')")
	src, err := os.ReadFile(csvPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "m.csv"), src, 0o644); err != nil {
		t.Fatal(err)
	}
	common := "  label: {name: y, column: rating, threshold: 4}\n  features: {name: x, columns: [age, occupation], fill: -1}\n"
	ids := "    - {name: t, column: title, hash_buckets: 100000}\n    - {name: g, column: genres, separator: \"|\", max_len: 4, vocab: {min_count: 1}}\n"
	want, err := Load(loadSpec(t, dir, "  csv: m.csv\n  header: true\n"+common+"  ids:\n"+ids))
	if err != nil {
		t.Fatal(err)
	}
	pq := loadSpec(t, dir, "  parquet: m.parquet\n"+common+"  ids:\n"+ids+
		"    - {name: l, column: genre_list, max_len: 4, vocab: {min_count: 1}}\n    - {name: b, column: big, key: uint64}\n    - {name: ba, column: bigage, key: uint64}\n")
	got, err := Load(pq)
	if err != nil {
		t.Fatal(err)
	}
	if got.Rows != 200 || !slices.Equal(got.Labels, want.Labels) {
		t.Fatalf("%d rows; labels equal: %v", got.Rows, slices.Equal(got.Labels, want.Labels))
	}
	for i, v := range want.Features {
		if v == 0 && got.Features[i] == -1 { // occupation 0 written as NULL: the fill
			continue
		}
		if got.Features[i] != v {
			t.Fatalf("feature %d: %v, the CSV's %v", i, got.Features[i], v)
		}
	}
	// per row: t (1), g (4) as in the CSV, then l (4) equal to g
	for r := range got.Rows {
		g, w := got.IDs[r*9:r*9+9], want.IDs[r*5:r*5+5]
		if !slices.Equal(g[:5], w) || !slices.Equal(g[5:9], w[1:5]) {
			t.Fatalf("row %d: ids %v, the CSV's %v (and its genres again)", r, g, w)
		}
	}
	first, _ := strconv.ParseUint(strings.SplitN(strings.SplitN(string(src), "\n", 3)[1], ",", 2)[0], 10, 64)
	if want := first + 18446744073709540000; got.Keys[0] != int64(want) {
		t.Errorf("uint64 key %d", got.Keys[0])
	}
	// bigage: few distinct values, dictionary-encoded unsigned integers
	for r := range got.Rows {
		if want := uint64(want.Features[r*2]) + 18446744073709540000; got.Keys[r*2+1] != int64(want) {
			t.Fatalf("row %d: uint64 key %d, want %d", r, uint64(got.Keys[r*2+1]), want)
		}
	}
	b := readStreamed(t, pq, got.Rows)
	for r := range got.Rows {
		if b.ids.I[r] != got.IDs[r*9] || b.labels.I[r] != got.Labels[r] {
			t.Fatalf("row %d streamed differs from loaded", r)
		}
	}
	if !slices.Equal(b.features.F, got.Features) {
		t.Errorf("streamed features differ from loaded")
	}
}

// A streamed tfrecord or parquet file far larger than a batch is read in
// memory that does not grow with it: the source holds its buffers (a
// page a column for parquet), and reading batches allocates next to
// nothing once they have grown: nothing a row for tfrecord. For parquet,
// parquet-go decodes each page into buffers from its sync.Pools and
// allocates a few small objects a page: about a sixth of the bytes read on
// this file (5.0 MB of 31.7 MB), bounded here at a quarter. The collector
// is off while the batches are read: a collection empties the pools, so
// with it on, the figure followed the GC's timing (41.6 MB in one CI run
// under load), not the reader.
func TestBinaryFormatsStreamInBoundedMemory(t *testing.T) {
	dir := t.TempDir()
	const rows = 60000
	tfr := filepath.Join(dir, "big.tfrecords")
	testfix.WriteTFRecord(t, "big", strconv.Itoa(rows), tfr)
	spec := "  label: {name: y, column: label}\n  features: {name: x, columns: I1..I13}\n  ids: {name: c, columns: C1..C26, hash_buckets: 100000}\n  stream: true\n"
	cases := []struct{ name, src string }{{"tfrecord", "  tfrecord: big.tfrecords\n"}}
	if testfix.DuckDBNode() != "" {
		pq := filepath.Join(dir, "big.parquet")
		var sel strings.Builder
		sel.WriteString("SELECT i % 2 AS label")
		for j := 1; j <= 13; j++ {
			sel.WriteString(", (i * " + strconv.Itoa(j) + ") % 1000 AS I" + strconv.Itoa(j))
		}
		for j := 1; j <= 26; j++ {
			sel.WriteString(", printf('%08x', (i * 2654435761 + " + strconv.Itoa(j) + ") % 4294967296) AS C" + strconv.Itoa(j))
		}
		sel.WriteString(" FROM range(" + strconv.Itoa(rows) + ") t(i)") // the tfrecord's rows, not repeated
		testfix.WriteParquet(t, pq, 5000, sel.String())
		cases = append(cases, struct{ name, src string }{"parquet", "  parquet: big.parquet\n"})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := loadSpec(t, dir, c.src+spec)
			fs, err := OpenStream(d)
			if err != nil {
				t.Fatal(err)
			}
			defer fs.Close()
			const batchRows = 256
			b := newBatch(d, batchRows)
			fill := func(k int64) {
				if err := fs.Fill(k*batchRows, b.all); err != nil {
					t.Fatal(err)
				}
			}
			fill(0)
			var before, after runtime.MemStats
			runtime.GC()
			defer debug.SetGCPercent(debug.SetGCPercent(-1))
			runtime.ReadMemStats(&before)
			for k := int64(1); k < 2*rows/batchRows; k++ { // two epochs
				fill(k)
			}
			runtime.ReadMemStats(&after)
			st, _ := os.Stat(filepath.Join(dir, strings.Fields(c.src)[1]))
			held := heldBy(fs.src)
			if held*4 > st.Size() {
				t.Errorf("the stream holds %d bytes of a %d-byte file", held, st.Size())
			}
			limit := st.Size() / 100 // tfrecord: the batches' growth at most
			if c.name == "parquet" {
				limit = st.Size() / 2 // two reads: a quarter of the bytes read
			}
			// the race detector's sync.Pool drops items at random
			if grew := after.TotalAlloc - before.TotalAlloc; grew > uint64(limit) && !testfix.Race {
				t.Errorf("reading the %d-byte file twice allocated %d bytes, more than %d", st.Size(), grew, limit)
			}
			// the values read are the writer's: row 7's I3 and label
			if err := fs.Fill(4096, b.all); err != nil { // rows 4096.. are rows 0.. again in the tfrecord
				t.Fatal(err)
			}
			fill(0)
			if got := b.features.F[7*13+2]; got != float32((7*3)%1000) || b.labels.I[7] != 1 {
				t.Errorf("row 7: I3 %v label %d", got, b.labels.I[7])
			}
		})
	}
}

// ctrNames are the columns of psgraph gen criteo's TSV.
func ctrNames() []string {
	names := []string{"label"}
	for j := 1; j <= 13; j++ {
		names = append(names, "I"+strconv.Itoa(j))
	}
	for j := 1; j <= 26; j++ {
		names = append(names, "C"+strconv.Itoa(j))
	}
	return names
}

// writeCTRParquet writes the rows of psgraph gen criteo's TSV as parquet
// by DuckDB (the counts BIGINT, the categoricals VARCHAR, an empty field
// a null), in row groups of rowGroup rows.
func writeCTRParquet(tb testing.TB, tsv, out string, rowGroup int) {
	cols := "{"
	for i, n := range ctrNames() {
		if i > 0 {
			cols += ", "
		}
		typ := "BIGINT"
		if n[0] == 'C' {
			typ = "VARCHAR"
		}
		cols += "'" + n + "': '" + typ + "'"
	}
	cols += "}"
	testfix.WriteParquet(tb, out, rowGroup, "SELECT * FROM read_csv('"+tsv+"', delim='\\t', header=false, columns="+cols+")")
}

// The CTR example's data (psgraph gen criteo: empty counts and
// categoricals, 26 hashed columns, labels), 5,000 rows, read from
// TFRecords of it (a missing feature for an empty count) and from
// parquet DuckDB wrote of it in three row groups (nulls for the empty
// fields; its pages dictionary-encoded or plain as DuckDB chose) gives
// the TSV's rows exactly, loaded and streamed in batches that cross the
// row groups' ends (some batches skipped, as another trainer's are).
func TestBinaryFormatsReadTheCTRDataAsTheTSV(t *testing.T) {
	dir := t.TempDir()
	tsv := filepath.Join(dir, "ctr.tsv")
	f, err := os.Create(tsv)
	if err != nil {
		t.Fatal(err)
	}
	const rows = 5000
	if _, err := criteo.Generate(f, criteo.Options{Rows: rows, Seed: 3}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	testfix.WriteTFRecord(t, "tsv", tsv, strconv.Itoa(rows), filepath.Join(dir, "ctr.tfrecords"))
	names := "  names: [" + strings.Join(ctrNames(), ", ") + "]\n"
	spec := "  label: {name: click, column: label}\n  features: {name: dense, columns: I1..I13, fill: 0, transform: log}\n" +
		"  ids:\n    - {name: cat, columns: C1..C26, hash_buckets: 1000000}\n    - {name: k, columns: [C3, C9], key: hash64}\n"
	want, err := Load(loadSpec(t, dir, "  csv: ctr.tsv\n  delimiter: tab\n"+names+spec))
	if err != nil {
		t.Fatal(err)
	}
	if want.Rows != rows || !slices.Contains(want.Features, 0) {
		t.Fatalf("the TSV: %d rows, want %d with empty counts filled", want.Rows, rows)
	}
	srcs := []string{"  tfrecord: ctr.tfrecords\n" + names}
	if testfix.DuckDBNode() != "" {
		writeCTRParquet(t, tsv, filepath.Join(dir, "ctr.parquet"), 2048)
		srcs = append(srcs, "  parquet: ctr.parquet\n")
	} else {
		t.Log("parquet not read: node or @duckdb/node-api is not installed")
	}
	for _, src := range srcs {
		d := loadSpec(t, dir, src+spec)
		got, err := Load(d)
		if err != nil {
			t.Fatal(err)
		}
		if got.Rows != rows || !slices.Equal(got.IDs, want.IDs) || !slices.Equal(got.Keys, want.Keys) || !slices.Equal(got.Labels, want.Labels) || !slices.Equal(got.Features, want.Features) {
			t.Fatalf("%s%d rows; equal to the TSV's: ids %v, keys %v, labels %v, features %v", src, got.Rows, slices.Equal(got.IDs, want.IDs), slices.Equal(got.Keys, want.Keys), slices.Equal(got.Labels, want.Labels), slices.Equal(got.Features, want.Features))
		}
		fs, err := OpenStream(d)
		if err != nil {
			t.Fatal(err)
		}
		const batch = 300 // 2048 is not a multiple: batches cross the row groups' ends
		bt := newBatch(d, batch)
		for k := 0; k*batch < rows; k++ {
			if k%3 == 1 { // and another trainer's batches, skipped, between them
				continue
			}
			if err := fs.Fill(int64(k*batch), bt.all); err != nil {
				t.Fatal(err)
			}
			for r := 0; r < batch && k*batch+r < rows; r++ {
				i := k*batch + r
				if !slices.Equal(bt.ids.I[r*26:r*26+26], want.IDs[i*26:i*26+26]) || !slices.Equal(bt.features.F[r*13:r*13+13], want.Features[i*13:i*13+13]) || bt.labels.I[r] != want.Labels[i] {
					t.Fatalf("%sstreamed row %d differs from the TSV's", src, i)
				}
			}
		}
		fs.Close()
	}
}

// BenchmarkFormats reads the CTR example's data (examples/ctr.yaml: psgraph
// gen criteo's 200,000 rows; the label, 13 counts filled and log
// transformed, 26 categoricals hashed) streamed in batches of 256, from
// the TSV, from a TFRecord file of the same rows (written by
// write_tfrecord.py, its first 8192 rows repeated) and from a parquet file
// of them (written by DuckDB): rows/s of each, and the process's CPU time
// a row (which a shared machine's other load moves less). The target is
// parquet and tfrecord at >= 0.8x the TSV's rate (bench/formats.sh runs
// it).
//
// With PSGRAPH_FORMATS_DIR set, the files are kept in that directory and
// read from it when there: a run that writes them, then runs that only
// read them (bench/formats-ir.sh counts the instructions a row under
// callgrind, which cannot run the writers).
func BenchmarkFormats(b *testing.B) {
	dir := os.Getenv("PSGRAPH_FORMATS_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	tsv := filepath.Join(dir, "ctr.tsv")
	const rows = 200000
	if !exists(filepath.Join(dir, "ctr.tfrecords")) {
		f, _ := os.Create(tsv)
		if _, err := criteo.Generate(f, criteo.Options{Rows: rows, Seed: 1}); err != nil {
			b.Fatal(err)
		}
		f.Close()
		testfix.WriteTFRecord(b, "tsv", tsv, strconv.Itoa(rows), filepath.Join(dir, "ctr.tfrecords"))
	}
	names := ctrNames()
	spec := "  label: {name: click, column: label}\n  features: {name: dense, columns: I1..I13, fill: 0, transform: log}\n  ids: {name: cat, columns: C1..C26, hash_buckets: 1000000}\n  stream: true\n"
	cases := []struct{ name, src string }{
		{"tsv", "  csv: ctr.tsv\n  delimiter: tab\n  names: [" + strings.Join(names, ", ") + "]\n"},
		{"tfrecord", "  tfrecord: ctr.tfrecords\n  names: [" + strings.Join(names, ", ") + "]\n"},
	}
	if pq := filepath.Join(dir, "ctr.parquet"); exists(pq) || testfix.DuckDBNode() != "" {
		if !exists(pq) {
			writeCTRParquet(b, tsv, pq, 122880)
		}
		cases = append(cases, struct{ name, src string }{"parquet", "  parquet: ctr.parquet\n"})
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			d := loadSpec(b, dir, c.src+spec)
			fs, err := OpenStream(d)
			if err != nil {
				b.Fatal(err)
			}
			defer fs.Close()
			const batch = 256
			bt := newBatch(d, batch)
			b.ReportAllocs()
			b.ResetTimer()
			cpu := testfix.ProcessCPU()
			for k := 0; k < b.N; k++ {
				if err := fs.Fill(int64(k*batch), bt.all); err != nil {
					b.Fatal(err)
				}
			}
			if cpu > 0 {
				b.ReportMetric(float64(testfix.ProcessCPU()-cpu)/float64(b.N*batch), "cpu-ns/row")
			}
			b.ReportMetric(float64(b.N*batch)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}

// exists says whether a file is there.
func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
