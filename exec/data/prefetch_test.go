package data

import (
	"errors"
	"testing"
	"time"

	"github.com/psgraph/psgraph/exec/tensor"
)

// A Prefetch of a FileStream serves the batches the in-memory stream
// serves, for 2 trainers' turns over three epochs and more (batches across
// the file's end), with the next batch parsed ahead as the trainer asks
// for it, a hint that turns out wrong (the next Fill goes back: dropped,
// read on demand), a Fill with no hint, and after Close.
func TestPrefetchServesTheStreamsBatches(t *testing.T) {
	const rows = 157
	g := loadModel(t, "train.tsv", criteoFile(t, rows, 5, true), criteoSpec+"  normalize: standard\n")
	set, err := Load(g.Data)
	if err != nil {
		t.Fatal(err)
	}
	mem := NewStream(set)
	const trainers, batch = 2, 9
	for tr := range trainers {
		fs, err := openStream(g.Data, 64, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		pf := NewPrefetch(fs)
		want, got := newBatch(g.Data, batch), newBatch(g.Data, batch)
		startOf := func(k int) int64 { return int64(k*trainers*batch + tr*batch) }
		ks := []int{}
		for k := range 3*rows/(trainers*batch) + 2 {
			ks = append(ks, k)
		}
		ks = append(ks, 4, 30, 31) // back to step 4 against the hint; then no hint before 31
		for i, k := range ks {
			if i == len(ks)-2 {
				pf.Close() // 31: on demand, the source the caller's again
			}
			if err := pf.Fill(startOf(k), got.all); err != nil {
				t.Fatal(err)
			}
			mem.Fill(startOf(k), want.all)
			if !got.equal(want) {
				t.Fatalf("trainer %d step %d (call %d): the batch differs from the in-memory stream's", tr, k, i)
			}
			if i+1 < len(ks) {
				pf.Ahead(startOf(k + 1))
			}
		}
		pf.Close()
		fs.Close()
		// Every Fill of a step in turn took the batch parsed ahead; the
		// ones against the hint (4), after Close (30, 31) and the first
		// read their own.
		if want := len(ks) - 4; pf.Served() != want {
			t.Errorf("trainer %d: %d Fills took the batch parsed ahead, want %d of %d", tr, pf.Served(), want, len(ks))
		}
	}
}

// fakeBatches is a Batches whose Fill reports each start it is asked for,
// waits until released, writes the start into the first value of every
// tensor, and fails for one start.
type fakeBatches struct {
	called  chan int64
	release chan struct{}
	bad     int64
}

var errFakeFill = errors.New("the file changed")

func (f *fakeBatches) Fill(start int64, dst []*tensor.Tensor) error {
	f.called <- start
	<-f.release
	for _, t := range dst {
		t.F[0] = float32(start)
	}
	if start == f.bad {
		return errFakeFill
	}
	return nil
}

// Ahead parses the hinted batch before the Fill that takes it (the source
// is called with it while the caller has not asked yet), and that Fill
// gets its values and its error.
func TestPrefetchParsesAheadOfTheFill(t *testing.T) {
	f := &fakeBatches{called: make(chan int64, 4), release: make(chan struct{}, 4), bad: 20}
	pf := NewPrefetch(f)
	dst := []*tensor.Tensor{tensor.New(tensor.F32, tensor.Shape{2, 3})}
	f.release <- struct{}{}
	if err := pf.Fill(0, dst); err != nil || <-f.called != 0 {
		t.Fatalf("first Fill: %v", err)
	}
	for _, start := range []int64{10, 20} {
		pf.Ahead(start)
		select {
		case got := <-f.called:
			if got != start {
				t.Fatalf("parsed ahead %d, want %d", got, start)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("Ahead(%d): the source was not asked for the batch before its Fill", start)
		}
		f.release <- struct{}{}
		err := pf.Fill(start, dst)
		if start == f.bad && !errors.Is(err, errFakeFill) {
			t.Fatalf("Fill(%d) of a batch that failed ahead: %v, want its error", start, err)
		} else if start != f.bad && err != nil {
			t.Fatal(err)
		}
		if dst[0].F[0] != float32(start) {
			t.Fatalf("Fill(%d) wrote the batch of %v", start, dst[0].F[0])
		}
	}
	pf.Close()
	if pf.Served() != 2 {
		t.Errorf("%d Fills took the batch parsed ahead, want 2", pf.Served())
	}
	if len(f.called) != 0 {
		t.Fatalf("the source was asked for %d more batches", len(f.called))
	}
}
