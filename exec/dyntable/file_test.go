package dyntable

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// goldenTable is a small table with admission, ttl and optimizer state,
// after a few steps, deterministically.
func goldenTable(t *testing.T) *Table {
	t.Helper()
	tab, err := New(Config{Dim: 3, StateWidth: 2, Seed: 5, Init: Init{Kind: Normal, Std: 0.5},
		StateInit: []float32{0.1, 0}, MinCount: 2, SketchBytes: 1024, TTL: 3})
	if err != nil {
		t.Fatal(err)
	}
	keys := []int64{7, -3, 1 << 40, 12345678901234, -9223372036854775808, 42}
	slots := make([]int32, len(keys))
	for step := range int64(4) {
		if err := tab.Advance(step); err != nil {
			t.Fatal(err)
		}
		ks := keys[:len(keys)-int(step%2)] // key 42 seen every other step
		if step == 3 {
			ks = keys[2:] // 7 and -3 expire later
		}
		if err := tab.Lookup(ks, nil, slots); err != nil {
			t.Fatal(err)
		}
		upd := make([]float32, len(ks)*5)
		if err := tab.Gather(slots[:len(ks)], 0, 5, upd); err != nil {
			t.Fatal(err)
		}
		for i := range upd {
			upd[i] += float32(i) / 8
		}
		if err := tab.Scatter(slots[:len(ks)], 0, 5, upd); err != nil {
			t.Fatal(err)
		}
	}
	return tab
}

func writeCut(t *testing.T, tab *Table, kind Kind, layout Layout) *memFile {
	t.Helper()
	c, err := tab.Cut(kind)
	if err != nil {
		t.Fatal(err)
	}
	f := &memFile{}
	if _, err := c.WriteSafetensors(f, "emb", layout); err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(); err != nil {
		t.Fatal(err)
	}
	return f
}

// The files are stable (golden files in testdata; go test -update
// rewrites them) and numpy reads them with nothing but the format's
// description: testdata/read_numpy.py, run with /usr/bin/python3, parses
// the golden files with json, struct and numpy.frombuffer and writes what
// it read to testdata/numpy_read.json, which must hold the table's keys,
// values, state and meta exactly.
func TestFilesReadByNumpy(t *testing.T) {
	tab := goldenTable(t)
	files := map[string]*memFile{
		"checkpoint.safetensors": writeCut(t, tab, Snapshot, Checkpoint),
		"model.safetensors":      writeCut(t, tab, Export, Model),
	}
	for name, f := range files {
		path := filepath.Join("testdata", name)
		if *update {
			if err := os.WriteFile(path, f.b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(f.b, want) {
			t.Errorf("%s differs from the golden file (go test -update rewrites it; then rerun testdata/read_numpy.py)", name)
		}
	}
	raw, err := os.ReadFile("testdata/numpy_read.json")
	if err != nil {
		t.Fatal(err)
	}
	type tensor struct {
		DType string          `json:"dtype"`
		Shape []int           `json:"shape"`
		Data  json.RawMessage `json:"data"`
	}
	var read map[string]struct {
		Metadata map[string]string `json:"metadata"`
		Tensors  map[string]tensor `json:"tensors"`
	}
	if err := json.Unmarshal(raw, &read); err != nil {
		t.Fatal(err)
	}
	st := stateOf(tab)
	for file, names := range map[string][]string{
		"checkpoint.safetensors": {"emb.keys", "emb", "emb.state", "emb.meta", "emb.removed", "emb.sketch_chunks", "emb.sketch"},
		"model.safetensors":      {"emb.keys", "emb"},
	} {
		got := read[file]
		var gotNames []string
		for n := range got.Tensors {
			gotNames = append(gotNames, n)
		}
		slices.Sort(gotNames)
		slices.Sort(names)
		if !slices.Equal(gotNames, names) {
			t.Fatalf("numpy read tensors %v from %s, want %v", gotNames, file, names)
		}
		var keys []int64
		var vals [][]float64
		if err := json.Unmarshal(got.Tensors["emb.keys"].Data, &keys); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(got.Tensors["emb"].Data, &vals); err != nil {
			t.Fatal(err)
		}
		if len(keys) != len(st.rows) || got.Metadata["dim"] != "3" {
			t.Fatalf("%s: numpy read %d keys (table: %d live rows) and metadata %v", file, len(keys), len(st.rows), got.Metadata)
		}
		var state [][]float64
		var meta []uint64
		if file == "checkpoint.safetensors" {
			json.Unmarshal(got.Tensors["emb.state"].Data, &state)
			json.Unmarshal(got.Tensors["emb.meta"].Data, &meta)
		}
		for i, k := range keys {
			row, ok := st.rows[k]
			if !ok {
				t.Fatalf("%s: numpy read key %d, which has no live row", file, k)
			}
			for j, v := range vals[i] {
				if math.Float32bits(float32(v)) != uint32(row[1+j]) {
					t.Errorf("%s: key %d value %d: numpy read %v, the table has %v", file, k, j, v, math.Float32frombits(uint32(row[1+j])))
				}
			}
			for j, v := range state {
				if j == i {
					for c, x := range v {
						if math.Float32bits(float32(x)) != uint32(row[4+c]) {
							t.Errorf("%s: key %d state %d: numpy read %v", file, k, c, x)
						}
					}
				}
			}
			if meta != nil && meta[i] != row[0] {
				t.Errorf("%s: key %d meta: numpy read %#x, the table has %#x", file, k, meta[i], row[0])
			}
		}
	}
}

// A model file read back for evaluation: every key reads its value, a key
// it does not hold reads the default, and nothing a read does changes it.
func TestLoadModel(t *testing.T) {
	tab := goldenTable(t)
	f := writeCut(t, tab, Export, Model)
	def := []float32{-1, -2, -3}
	m, err := LoadModel(f, f.size(), "emb", def)
	if err != nil {
		t.Fatal(err)
	}
	st := stateOf(tab)
	keys := []int64{99} // not in the file
	for k := range st.rows {
		keys = append(keys, k)
	}
	got := make([]float32, 3*len(keys))
	for range 2 {
		if err := m.Read(keys, got); err != nil {
			t.Fatal(err)
		}
	}
	if !slices.Equal(got[:3], def) {
		t.Errorf("an unseen key read %v, want the default %v", got[:3], def)
	}
	for i, k := range keys[1:] {
		for j := range 3 {
			if math.Float32bits(got[3*(i+1)+j]) != uint32(st.rows[k][1+j]) {
				t.Fatalf("key %d column %d: %v", k, j, got[3*(i+1)+j])
			}
		}
	}
	if s := m.Stats(); s.Live != int64(len(st.rows)) || s.Admitted != 0 {
		t.Errorf("the model table holds %d rows (admitted %d), want %d", s.Live, s.Admitted, len(st.rows))
	}
	if _, err := LoadModel(f, f.size(), "other", nil); err == nil || !strings.Contains(err.Error(), `no tensor "other.keys"`) {
		t.Errorf("loading a table the file does not hold: %v", err)
	}
}

// Apply refuses files that do not belong: each error names the file and
// what is wrong, and the table is left as it was.
func TestApplyRefusesForeignFiles(t *testing.T) {
	src := goldenTable(t)
	snap := writeCut(t, src, Snapshot, Checkpoint)
	src.Lookup([]int64{1, 2}, nil, make([]int32, 2))
	d1 := writeCut(t, src, Delta, Checkpoint)
	model := writeCut(t, src, Export, Model) // an export between two deltas leaves the chain alone
	d2 := writeCut(t, src, Delta, Checkpoint)
	cfg := src.Config()

	truncated := &memFile{b: snap.b[:len(snap.b)-7]}
	badHeader := &memFile{b: slices.Clone(snap.b)}
	copy(badHeader.b[8:], "[[[")
	for _, c := range []struct {
		name  string
		cfg   func(*Config)
		first *memFile // applied before, successfully
		file  *memFile
		want  string
	}{
		{"truncated", nil, nil, truncated, "data offsets"},
		{"bad header", nil, nil, badHeader, "not a valid safetensors file"},
		{"wrong dim", func(c *Config) { c.Dim, c.Default = 4, nil }, nil, snap, "dim 3; this table has 4"},
		{"wrong state", func(c *Config) { c.StateWidth, c.StateInit = 0, nil }, nil, snap, "state_width 2; this table has 0"},
		{"wrong min_count", func(c *Config) { c.MinCount = 3 }, nil, snap, "min_count 2; this table has 3"},
		{"wrong seed", func(c *Config) { c.Seed = 6 }, nil, snap, "seed 5; this table has 6"},
		{"delta first", nil, nil, d1, "restore its snapshot first"},
		{"delta skipped", nil, snap, d2, "apply the files in order"},
		{"snapshot twice", nil, snap, snap, "restore it into a new table"},
		{"model file", nil, nil, model, "read a model file with LoadModel"},
	} {
		cc := cfg
		if c.cfg != nil {
			c.cfg(&cc)
		}
		tab, err := New(cc)
		if err != nil {
			t.Fatal(err)
		}
		if c.first != nil {
			if err := tab.Apply(c.first, c.first.size(), "emb"); err != nil {
				t.Fatal(err)
			}
		}
		before := stateOf(tab)
		err = tab.Apply(c.file, c.file.size(), "emb")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "emb") {
			t.Errorf("%s: error %v, want one naming the table and saying %q", c.name, err, c.want)
		}
		if err := stateOf(tab).diff(before); err != nil {
			t.Errorf("%s: the refused file changed the table: %v", c.name, err)
		}
	}
	// In order, they apply.
	tab, _ := New(cfg)
	for _, f := range []*memFile{snap, d1, d2} {
		if err := tab.Apply(f, f.size(), "emb"); err != nil {
			t.Fatal(err)
		}
	}
	if err := stateOf(tab).diff(stateOf(src)); err != nil {
		t.Errorf("restored: %v", err)
	}
	c, _ := src.Cut(Export)
	defer c.Abort()
	if _, err := c.WriteSafetensors(&memFile{}, "emb", Checkpoint); err == nil || !strings.Contains(err.Error(), "take a Snapshot") {
		t.Errorf("an export written as a checkpoint: %v", err)
	}
}

// A hostile file is refused at its header, before a byte of its data is
// read: keys whose data offsets [2^63-1, -2^63+7] differ by the 8 bytes
// of their shape (the end before the begin), or a second tensor over the
// keys' bytes. LoadModel and Apply name the file and say what is wrong.
func TestHostileHeadersRefused(t *testing.T) {
	for name, c := range map[string]struct{ header, want string }{
		"wrapping offsets": {`{"emb.keys":{"dtype":"I64","shape":[1],"data_offsets":[9223372036854775807,-9223372036854775801]},` +
			`"emb":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]}}`, "do not match shape [1]"},
		"overlapping tensors": {`{"emb.keys":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},` +
			`"emb":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]}}`, "overlaps"},
	} {
		for len(c.header)%8 != 0 {
			c.header += " "
		}
		b := binary.LittleEndian.AppendUint64(nil, uint64(len(c.header)))
		f := &memFile{b: append(append(b, c.header...), make([]byte, 8)...)}
		if _, err := LoadModel(f, f.size(), "emb", nil); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "not a valid safetensors file") {
			t.Errorf("LoadModel of %s: %v, want %q", name, err, c.want)
		}
		tab, _ := New(Config{Dim: 2})
		if err := tab.Apply(f, f.size(), "emb"); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "dynamic table emb") {
			t.Errorf("Apply of %s: %v, want %q", name, err, c.want)
		}
	}
}

type failingFile struct{ after int }

func (f *failingFile) WriteAt(p []byte, off int64) (int, error) {
	if f.after--; f.after < 0 {
		return 0, errors.New("disk full")
	}
	return len(p), nil
}

// A delta whose file could not be written cannot be committed; aborted,
// its rows go to the next delta, so the chain still restores the table.
func TestFailedWriteIsNotCommitted(t *testing.T) {
	tab := goldenTable(t)
	snap := writeCut(t, tab, Snapshot, Checkpoint)
	tab.Advance(4)
	tab.Lookup([]int64{1 << 40, 99}, []uint32{2, 2}, make([]int32, 2))
	c, err := tab.Cut(Delta)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WriteSafetensors(&failingFile{after: 2}, "emb", Checkpoint); err == nil || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("writing to a full disk: %v", err)
	}
	if err := c.Commit(); err == nil || !strings.Contains(err.Error(), "Abort it") {
		t.Fatalf("committing a failed write: %v", err)
	}
	c.Abort()
	delta := writeCut(t, tab, Delta, Checkpoint)
	restored, _ := New(tab.Config())
	for _, f := range []*memFile{snap, delta} {
		if err := restored.Apply(f, f.size(), "emb"); err != nil {
			t.Fatal(err)
		}
	}
	got, want := stateOf(restored), stateOf(tab)
	if err := got.diff(want); err != nil {
		t.Fatal(err)
	}
}

// Each hands an export's rows to a custom sink: every live row once, with
// its value, state and meta; it refuses snapshots and deltas.
func TestEachExport(t *testing.T) {
	tab := goldenTable(t)
	tab.batch = 2
	want := stateOf(tab)
	c, _ := tab.Cut(Export)
	got := map[int64][]uint64{}
	err := c.Each(func(b *Batch) error {
		for i, k := range b.Keys {
			row := []uint64{b.Meta[i]}
			for _, f := range append(slices.Clone(b.Values[i*3:i*3+3]), b.State[i*2:i*2+2]...) {
				row = append(row, uint64(math.Float32bits(f)))
			}
			if _, dup := got[k]; dup {
				t.Errorf("key %d twice", k)
			}
			got[k] = row
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want.rows) {
		t.Fatalf("%d rows, want %d", len(got), len(want.rows))
	}
	for k, row := range want.rows {
		if !slices.Equal(got[k], row) {
			t.Errorf("key %d: %x, want %x", k, got[k], row)
		}
	}
	s, _ := tab.Cut(Snapshot)
	defer s.Abort()
	if err := s.Each(func(*Batch) error { return nil }); err == nil {
		t.Error("Each wrote a snapshot")
	}
}

// A checkpoint of format 1 (a fixed admission sketch) is refused with
// what to do, not resumed into a growing sketch it does not describe.
func TestFormat1CheckpointRefusedWithAdvice(t *testing.T) {
	f := writeCut(t, goldenTable(t), Snapshot, Checkpoint)
	old := []byte(`"psgraph.dyntable":"` + FormatVersion + `"`)
	if !bytes.Contains(f.b, old) {
		t.Fatalf("the checkpoint's header has no %s", old)
	}
	b := bytes.Replace(f.b, old, []byte(`"psgraph.dyntable":"1"`), 1) // same length: offsets stay
	tab, err := New(Config{Dim: 3, StateWidth: 2, Seed: 5, Init: Init{Kind: Normal, Std: 0.5},
		StateInit: []float32{0.1, 0}, MinCount: 2, SketchBytes: 1024, TTL: 3})
	if err != nil {
		t.Fatal(err)
	}
	err = tab.Apply(bytes.NewReader(b), int64(len(b)), "emb")
	if err == nil || !strings.Contains(err.Error(), "format 1") || !strings.Contains(err.Error(), "--init-from") {
		t.Fatalf("a format-1 checkpoint: %v, want a refusal naming the format and --init-from", err)
	}
	// the unchanged file restores
	if err := tab.Apply(bytes.NewReader(f.b), int64(len(f.b)), "emb"); err != nil {
		t.Fatal(err)
	}
}
