package replicate

import (
	"bytes"
	"slices"
	"testing"
)

// Frames read back as written: a delta of a strided block (split into
// several frames when large), rows by id, a dynamic table's rows by key
// and its shard's state, then the job's end.
func TestFramesRoundTrip(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b)
	big := make([]float32, MaxRowsBytes/4+3*4) // more than one frame of width 4
	for i := range big {
		big[i] = float32(i) * 0.5
	}
	if err := w.Begin(41, true); err != nil {
		t.Fatal(err)
	}
	if err := w.Rows(Rows{Name: "emb", First: 1, Stride: 2, Width: 4, Values: big}); err != nil {
		t.Fatal(err)
	}
	if err := w.Rows(Rows{Name: "W", IDs: []int64{7, -1}, Width: 1, Values: []float32{3, 4}}); err != nil {
		t.Fatal(err)
	}
	dyn := Rows{Name: "dyn", Keys: []int64{-5, 1 << 60}, Meta: []uint64{9, 1<<63 | 3}, Width: 2, Values: []float32{1, 2, 3, 4}}
	if err := w.Rows(dyn); err != nil {
		t.Fatal(err)
	}
	if err := w.Shard(Shard{Name: "dyn", Shard: 1, Shards: 2, Watermark: -1}); err != nil {
		t.Fatal(err)
	}
	if err := w.End(); err != nil {
		t.Fatal(err)
	}
	if err := w.Finished(); err != nil {
		t.Fatal(err)
	}
	r := NewReader(&b)
	f, err := r.Next()
	if err != nil || f.Kind != FrameBegin || f.Step != 41 || !f.Full {
		t.Fatalf("begin: %+v %v", f, err)
	}
	var got []float32
	next := int64(1)
	for {
		f, err = r.Next()
		if err != nil {
			t.Fatal(err)
		}
		if f.Rows.Name != "emb" {
			break
		}
		if f.Rows.First != next || f.Rows.Stride != 2 || f.Rows.Width != 4 {
			t.Fatalf("a frame of emb from %d stride %d width %d, want from %d", f.Rows.First, f.Rows.Stride, f.Rows.Width, next)
		}
		next += 2 * int64(f.Rows.Count())
		got = append(got, f.Rows.Values...)
	}
	if !slices.Equal(got, big) {
		t.Fatal("emb's rows differ")
	}
	if f.Kind != FrameRows || !slices.Equal(f.Rows.IDs, []int64{7, -1}) || !slices.Equal(f.Rows.Values, []float32{3, 4}) {
		t.Fatalf("W: %+v", f)
	}
	if f, err = r.Next(); err != nil || f.Kind != FrameRows || f.Rows.IDs != nil || !slices.Equal(f.Rows.Keys, dyn.Keys) || !slices.Equal(f.Rows.Meta, dyn.Meta) || !slices.Equal(f.Rows.Values, dyn.Values) {
		t.Fatalf("dyn: %+v %v", f, err)
	}
	if f, err = r.Next(); err != nil || f.Kind != FrameShard || f.Shard != (Shard{Name: "dyn", Shard: 1, Shards: 2, Watermark: -1}) {
		t.Fatalf("dyn's shard: %+v %v", f, err)
	}
	for _, want := range []byte{FrameEnd, FrameFinished} {
		if f, err := r.Next(); err != nil || f.Kind != want {
			t.Fatalf("%+v %v, want kind %d", f, err, want)
		}
	}
}

// A reader never panics nor allocates past MaxRowsBytes on any input.
func FuzzReadFrames(f *testing.F) {
	var b bytes.Buffer
	w := NewWriter(&b)
	w.Begin(3, false)
	w.Rows(Rows{Name: "x", IDs: []int64{1}, Width: 2, Values: []float32{1, 2}})
	w.Rows(Rows{Name: "d", Keys: []int64{1}, Meta: []uint64{2}, Width: 1, Values: []float32{1}})
	w.Shard(Shard{Name: "d", Shard: 0, Shards: 1, Watermark: 4})
	w.End()
	f.Add(b.Bytes())
	f.Add([]byte{2, 1, 'x', 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 255, 255, 255, 255, 255, 255, 255, 255, 0})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewReader(bytes.NewReader(data))
		for {
			fr, err := r.Next()
			if err != nil {
				return
			}
			if fr.Kind == FrameRows && (fr.Rows.Width <= 0 || len(fr.Rows.Values)%fr.Rows.Width != 0 || fr.Rows.IDs != nil && len(fr.Rows.IDs) != fr.Rows.Count() ||
				fr.Rows.Keys != nil && (len(fr.Rows.Keys) != fr.Rows.Count() || len(fr.Rows.Meta) != len(fr.Rows.Keys))) {
				t.Fatalf("an inconsistent rows frame %+v", fr.Rows)
			}
			if fr.Kind == FrameShard && (fr.Shard.Shard < 0 || fr.Shard.Shard >= fr.Shard.Shards) {
				t.Fatalf("an inconsistent shard frame %+v", fr.Shard)
			}
		}
	})
}

// Rows recycled after they were read are read into again, and hold what
// the next frames carry, not what the last ones did: every delta of
// rows by id and by key reads back as written, each recycled in turn.
func TestRecycledRowsReadAsWritten(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b)
	var want []Rows
	for d := range 20 {
		n := 1 + (d*37)%300 // sizes up and down, so buffers of other sizes are reused
		ids, keys, meta, vals := make([]int64, n), make([]int64, n), make([]uint64, n), make([]float32, 3*n)
		for i := range n {
			ids[i], keys[i], meta[i] = int64(d*1000+i), -int64(d*1000+i), uint64(d)<<32|uint64(i)
		}
		for i := range vals {
			vals[i] = float32(d) + float32(i)/1024
		}
		for _, r := range []Rows{{Name: "emb", IDs: ids, Width: 3, Values: vals}, {Name: "dyn", Keys: keys, Meta: meta, Width: 3, Values: vals}} {
			if err := w.Rows(r); err != nil {
				t.Fatal(err)
			}
			want = append(want, r)
		}
	}
	if err := w.End(); err != nil {
		t.Fatal(err)
	}
	r := NewReader(&b)
	for i, wr := range want {
		f, err := r.Next()
		if err != nil || f.Kind != FrameRows {
			t.Fatalf("frame %d: %+v %v", i, f, err)
		}
		g := f.Rows
		if g.Name != wr.Name || !slices.Equal(g.IDs, wr.IDs) || !slices.Equal(g.Keys, wr.Keys) || !slices.Equal(g.Meta, wr.Meta) || !slices.Equal(g.Values, wr.Values) {
			t.Fatalf("frame %d read back as %+v, want %+v", i, g, wr)
		}
		Recycle(g)
	}
}
