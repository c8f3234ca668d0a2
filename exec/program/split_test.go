package program

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/kernels"
)

// shardRendezvous is an in-memory twin of the pservers a trainer's
// fetch_rows talk to: it keeps each table's request per shard, and a
// receive of a table's rows blocks until every table's request of the step
// reached every shard (or the context ends), then answers the rows, row g
// of table t holding value 1000*t + g. It counts the requests in flight
// when the first reply was waited for.
type shardRendezvous struct {
	shards int
	tables map[string]int // a table's rows transfer -> its index

	mu        sync.Mutex
	cond      *sync.Cond
	ids       [][][]int32 // [table][shard]: the request's local ids
	sent      int         // requests of the step so far
	want      int         // requests a step holds: tables x shards
	atFirst   int         // requests in flight when the first reply was waited for (-1: none yet)
	recvCalls int
}

func newShardRendezvous(tables, shards, maxRows int) *shardRendezvous {
	r := &shardRendezvous{shards: shards, tables: map[string]int{}, want: tables * shards, atFirst: -1}
	r.cond = sync.NewCond(&r.mu)
	r.ids = make([][][]int32, tables)
	for t := range tables {
		r.tables[ops.TableRows(fmt.Sprintf("T%d", t))] = t
		r.tables[ops.TableIDs(fmt.Sprintf("T%d", t))] = t
		r.ids[t] = make([][]int32, shards)
		for s := range shards {
			r.ids[t][s] = make([]int32, 0, maxRows)
		}
	}
	return r
}

// newStep forgets the last step's requests.
func (r *shardRendezvous) newStep() {
	r.mu.Lock()
	r.sent, r.atFirst, r.recvCalls = 0, -1, 0
	r.mu.Unlock()
}

func (r *shardRendezvous) Send(_ context.Context, _ int64, to ir.Node, v string, _ ir.DType, payload []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.tables[v]
	if !ok || !strings.HasSuffix(v, "@ids") {
		return fmt.Errorf("unexpected send of %s", v)
	}
	r.ids[t][to.Index] = append(r.ids[t][to.Index][:0], unsafe.Slice((*int32)(unsafe.Pointer(unsafe.SliceData(payload))), len(payload)/4)...)
	r.sent++
	r.cond.Broadcast()
	return nil
}

func (r *shardRendezvous) Recv(ctx context.Context, _ int64, from ir.Node, v string, dst []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.recvCalls++; r.recvCalls == 1 {
		r.atFirst = r.sent
	}
	if r.sent < r.want {
		stop := context.AfterFunc(ctx, func() { r.mu.Lock(); r.cond.Broadcast(); r.mu.Unlock() })
		defer stop()
	}
	for r.sent < r.want {
		if ctx.Err() != nil {
			return 0, fmt.Errorf("%s from %s waited for a reply with %d of %d requests sent: the requests are not all in flight together", v, from, r.sent, r.want)
		}
		r.cond.Wait()
	}
	t := r.tables[v]
	rows := unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(dst))), len(dst)/4)
	d := len(rows) / cap(r.ids[t][from.Index])
	for i, local := range r.ids[t][from.Index] {
		for j := range d {
			rows[i*d+j] = float32(1000*t) + float32(int(local)*r.shards+from.Index)
		}
	}
	return 4 * d * len(r.ids[t][from.Index]), nil
}

// splitModel is a trainer graph with `tables` sharded tables, each read by
// one fetch_rows and one lookup_table, and their lookups summed.
func splitModel(t *testing.T, tables, shards, rows, d int) *dsl.Graph {
	t.Helper()
	dir := t.TempDir()
	csv := filepath.Join(dir, "ids.csv")
	if err := os.WriteFile(csv, []byte("1,2,3,0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var ids, opsYAML strings.Builder
	for k := range tables {
		fmt.Fprintf(&ids, "    - {name: c%d, columns: [0, 1], hash_buckets: %d}\n", k, rows)
		fmt.Fprintf(&opsYAML, "  - {type: fetch_rows, inputs: [c%d], outputs: [f%d], attrs: {shape: [%d, %d], shards: %d, var: T%d}}\n", k, k, rows, d, shards, k)
		fmt.Fprintf(&opsYAML, "  - {type: lookup_table, inputs: [f%d, c%d], outputs: [e%d]}\n", k, k, k)
		if k > 0 {
			fmt.Fprintf(&opsYAML, "  - {type: add, inputs: [s%d, e%d], outputs: [s%d]}\n", k-1, k, k)
		} else {
			opsYAML.WriteString("  - {type: identity, inputs: [e0], outputs: [s0]}\n")
		}
	}
	src := fmt.Sprintf("psgraph: 1\nname: split\ndata:\n  csv: %q\n  ids:\n%s  label: {name: y, column: 3}\nops:\n%s", csv, ids.String(), opsYAML.String())
	g, err := dsl.LoadBytes(filepath.Join(dir, "split.yaml"), []byte(src))
	if err != nil {
		t.Fatalf("%v\n%s", err, src)
	}
	return g
}

// Every table's request of a step is in flight before the first reply is
// waited for, on one goroutine and on several: a fetch_rows is split into
// its sends (run as soon as its ids are ready) and its receive (run only
// when nothing else is ready). The twin answers no table before every
// table asked, so a scheduler that blocked on a reply with a request not
// yet sent fails here (with the deadline) instead of passing slowly. The
// fetched rows are the twin's, and a step allocates nothing.
func TestSplitFetchesAllInFlight(t *testing.T) {
	const tables, shards, rows, d, batch = 6, 2, 50, 4, 8
	g := splitModel(t, tables, shards, rows, d)
	for _, workers := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			p, err := Compile(g, CompileOptions{Batch: batch, Workers: workers, Node: kernels.Node{Role: ir.TrainerRole, Trainers: 1}})
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			if p.sched.helpers != workers-1 {
				t.Errorf("%d goroutines, want %d: a split op's wait needs no goroutine of its own", p.sched.helpers+1, workers)
			}
			rv := newShardRendezvous(tables, shards, batch)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			rt := &Runtime{Ctx: ctx, RV: rv}
			var idsOf [][]int32
			for c := range tables {
				idsOf = append(idsOf, p.Scope[fmt.Sprintf("c%d", c)].I)
			}
			sum := p.Scope[fmt.Sprintf("s%d", tables-1)]
			step := func(k int) {
				for c, ids := range idsOf {
					for i := range ids {
						ids[i] = int32((k*7 + c*3 + i*11) % rows)
					}
				}
				rv.newStep()
				rt.StepNum = int64(k)
				if err := p.Run(rt); err != nil {
					t.Fatal(err)
				}
				// On one goroutine, exactly; on several, a goroutine with
				// nothing else to do may wait while another still sends (the
				// twin's barrier checks that all are sent eventually).
				if workers == 1 && rv.atFirst != tables*shards {
					t.Fatalf("step %d: %d of %d requests were sent when the first reply was waited for", k, rv.atFirst, tables*shards)
				}
				// s = sum over tables of the rows, row g of table c holding 1000c + g.
				s := sum.F
				for i := range batch {
					want := float32(0)
					for c := range tables {
						want += float32(1000*c + (k*7+c*3+i*11)%rows)
					}
					if s[i*d] != want || s[i*d+d-1] != want {
						t.Fatalf("step %d: row %d of the summed lookups is %v, want %v", k, i, s[i*d:(i+1)*d], want)
					}
				}
			}
			for k := range 3 {
				step(k)
			}
			k := 3
			if allocs := testing.AllocsPerRun(10, func() { step(k); k++ }); allocs != 0 {
				t.Errorf("%.1f allocations per step, want 0", allocs)
			}
		})
	}
}

// A split op failing in its Start does not run its wait, and the step
// reports the op.
func TestSplitStartErrorStopsTheStep(t *testing.T) {
	g := splitModel(t, 2, 2, 50, 4)
	p, err := Compile(g, CompileOptions{Batch: 4, Workers: 2, Node: kernels.Node{Role: ir.TrainerRole}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.Scope["c1"].I[0] = 50 // past the table
	rv := newShardRendezvous(2, 2, 4)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	p.OnError = func(error) { cancel() } // as a trainer does: a wait blocked on the peers returns
	err = p.Run(&Runtime{Ctx: ctx, RV: rv})
	if err == nil || !strings.Contains(err.Error(), "op fetch_rows") || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the fetch_rows of c1 to fail on id 50", err)
	}
}
