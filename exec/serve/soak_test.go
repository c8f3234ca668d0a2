package serve

import (
	"context"
	"flag"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"
)

var soakFor = flag.Duration("soak", 0, "run TestSoakMemoryIsFlat this long (bench/serve-soak.sh runs the server itself for 10 minutes)")

// Memory does not grow under a soak of requests and updates: examples/ctr.yaml
// (a 64 MiB table) answers requests of 100 rows from 4 goroutines while
// updates (its dense parameters and 1000 table rows each) are applied
// every few milliseconds and a new version is swapped in whole every
// second, as a reload does. The live heap after the first tenth of the
// run and at its end differ by less than 16 MiB. go test ./exec/serve
// -run TestSoakMemoryIsFlat -soak 30s (.ci/run does).
func TestSoakMemoryIsFlat(t *testing.T) {
	if *soakFor <= 0 {
		t.Skip("a soak: go test ./exec/serve -run TestSoakMemoryIsFlat -soak 30s")
	}
	g, base, lines := ctrServed(t, 400, 2)
	m, err := NewModel(g, base, 0)
	if err != nil {
		t.Fatal(err)
	}
	var reqs []*Request
	for i := 0; i+100 <= len(lines); i += 100 {
		r, err := DecodeRequest(rowsBody(lines[i:i+100]), m.Meta())
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, r)
	}
	ctx, cancel := context.WithTimeout(context.Background(), *soakFor)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for c := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var res Result
			for i := c; ctx.Err() == nil; i++ {
				if err := m.Infer(context.Background(), reqs[i%len(reqs)], &res); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	r := rand.New(rand.NewPCG(3, 4))
	ids := make([]int64, 1000)
	rows := make([]float32, 1000*16)
	wt := make([]float32, 128*64)
	measure := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	start, swapped := time.Now(), time.Now()
	var first uint64
	updates := 0
	for step := int64(1); ctx.Err() == nil; step++ {
		for i := range ids {
			ids[i] = r.Int64N(1_000_000)
		}
		for i := range wt {
			wt[i] = float32(r.NormFloat64())
		}
		if err := m.Apply(Update{Step: step, Dense: []DenseValues{{Name: "Wt1", Values: wt}}, Rows: []TableRows{{Name: "emb", IDs: ids, Values: rows}}}); err != nil {
			t.Fatal(err)
		}
		updates++
		if time.Since(swapped) > time.Second {
			p := base
			p.Version = step
			m.Swap(p)
			swapped = time.Now()
		}
		if first == 0 && time.Since(start) > *soakFor/10 {
			first = measure()
		}
		time.Sleep(2 * time.Millisecond)
	}
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	last := measure()
	runtime.KeepAlive(m)
	t.Logf("%d updates in %v; live heap %d MiB after a tenth, %d MiB at the end", updates, *soakFor, first>>20, last>>20)
	if last > first+16<<20 {
		t.Errorf("the live heap grew from %d MiB to %d MiB over the soak", first>>20, last>>20)
	}
}
