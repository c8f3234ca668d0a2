package replicate

import (
	"bytes"
	"slices"
	"testing"
)

// Frames read back as written: a delta of a strided block (split into
// several frames when large), rows by id, then the job's end.
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
			if fr.Kind == FrameRows && (fr.Rows.Width <= 0 || len(fr.Rows.Values)%fr.Rows.Width != 0 || fr.Rows.IDs != nil && len(fr.Rows.IDs) != fr.Rows.Count()) {
				t.Fatalf("an inconsistent rows frame %+v", fr.Rows)
			}
		}
	})
}
