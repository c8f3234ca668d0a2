package job

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/dsl/ops"
	"github.com/psgraph/psgraph/exec/comm"
	"github.com/psgraph/psgraph/exec/dyntable"
	"github.com/psgraph/psgraph/exec/kernels"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/partition"
	"github.com/psgraph/psgraph/transport"
)

// The messages of a dynamic table (docs/wire.md, "Dynamic tables") are
// checked where they arrive, as a fixed table's are: these tests play a
// trainer that sends a pserver what no psgraph trainer of the job would,
// over the in-memory transport and over TCP on loopback, and check that
// the pserver fails naming the trainer and that its shard (keys, rows,
// optimizer state, admissions) is bitwise unchanged.

// dynamicTableJob splits dynamicJob's model ({dim: 4}, adagrad) for n
// trainers and m pservers.
func dynamicTableJob(t *testing.T, n, m int, async bool) *Job {
	t.Helper()
	g, _ := dynamicJob(t, "{dim: 4}")
	mode := partition.Sync
	if async {
		mode = partition.Async
	}
	plan, err := partition.Split(g, partition.Options{Trainers: n, PServers: m, Mode: mode})
	if err != nil {
		t.Fatal(err)
	}
	return &Job{Trainer: plan.Trainer, PServers: plan.PServers, Trainers: n, Async: async, Params: plan.Info.ServedParams()}
}

// dynamicPart compiles the part of pserver i's graph that serves and
// updates its dynamic shard, as Serve runs it, and gives the shard rows
// for keys.
func dynamicPart(t *testing.T, j *Job, i int, ep transport.Endpoint, keys []int64) (*program.Program, *dyntable.Table, *program.Runtime) {
	t.Helper()
	for _, part := range program.Components(j.PServers[i]) {
		prog, err := program.Compile(part, program.CompileOptions{Sequential: true, Node: kernels.Node{Role: ir.PServerRole, Trainers: j.Trainers, Async: j.Async}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(prog.Close)
		if len(prog.Tables) == 0 {
			continue
		}
		tab := prog.Tables[prog.Lowered[0].Name]
		if err := tab.Lookup(keys, nil, make([]int32, len(keys))); err != nil {
			t.Fatal(err)
		}
		ts, err := part.Transfers(1, nil)
		if err != nil {
			t.Fatal(err)
		}
		c := comm.NewPServer(comm.Config{EP: ep, Trainers: j.Trainers, Async: j.Async, Transfers: ts})
		t.Cleanup(c.Close)
		return prog, tab, &program.Runtime{Ctx: context.Background(), PS: c.Part(nil, 0)}
	}
	t.Fatalf("pserver-%d holds no dynamic shard", i)
	return nil, nil, nil
}

// shardState is everything of a dynamic shard a step could change but
// the rows' last-seen steps: its live keys, their rows and optimizer
// state, and its admissions.
func shardState(t *testing.T, tab *dyntable.Table) string {
	t.Helper()
	c, err := tab.Cut(dyntable.Export)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Abort()
	var keys []int64
	if err := c.Each(func(b *dyntable.Batch) error {
		keys = append(keys, b.Keys...)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := c.Commit(); err != nil {
		t.Fatal(err)
	}
	slices.Sort(keys)
	cfg := tab.Config()
	w := cfg.Dim + cfg.StateWidth
	slots := make([]int32, len(keys))
	tab.Find(keys, slots)
	rows := make([]float32, len(keys)*w)
	if err := tab.Gather(slots, 0, w, rows); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("keys %v rows %v admitted %d", keys, rows, tab.Stats().Admitted)
}

// shardKeys are n keys dyntable.ShardOf places on shard s of m.
func shardKeys(s, m, n int) []int64 {
	var out []int64
	for k := int64(1); len(out) < n; k++ {
		if dyntable.ShardOf(k*1_000_000_007, m) == s {
			out = append(out, k*1_000_000_007)
		}
	}
	return out
}

// keyRequest is a request payload: keys (int64), then counts (uint32).
func keyRequest(keys []int64, counts ...uint32) []byte {
	var b []byte
	for _, k := range keys {
		b = binary.LittleEndian.AppendUint64(b, uint64(k))
	}
	for _, c := range counts {
		b = binary.LittleEndian.AppendUint32(b, c)
	}
	return b
}

// keyGrad is a row gradient payload: keys, then d values each.
func keyGrad(d int, keys ...int64) []byte {
	b := keyRequest(keys)
	for i := range len(keys) * d {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(0.5+float32(i)))
	}
	return b
}

// A pserver given a bad request or row gradient of its dynamic shard
// fails naming the trainer that sent it and applies nothing: no key is
// admitted, no row or optimizer state changes. Sync: a bad piece from
// trainer-1 also keeps trainer-0's good one from being applied.
func TestDynamicHostileTrainerInput(t *testing.T) {
	const d, batch = 4, 8 // a request holds at most 24 keys (288 bytes), a gradient 24 rows (24 * 24 bytes)
	mine, theirs := shardKeys(0, 2, 3), shardKeys(1, 2, 1)
	fresh := shardKeys(0, 2, 5)[3:] // of shard 0, without rows
	ids, grads := ops.TableIDs("emb"), ops.GradName("emb")
	type msg struct {
		from    int
		v       string
		payload []byte
	}
	good := func(from int) []msg {
		return []msg{{from, ids, keyRequest(append(mine[:2:2], fresh[0]), 1, 2, 1)}, {from, grads, keyGrad(d, mine[0], mine[1], fresh[0])}}
	}
	cases := []struct {
		name string
		msgs []msg
		want []string // in the error
	}{
		{"key of another shard", append(good(0), msg{1, ids, keyRequest([]int64{fresh[1], theirs[0]}, 1, 1)}),
			[]string{fmt.Sprintf("trainer-1 sent key %d in a request of dynamic table emb to shard 0 of 2, but the key belongs to shard 1", theirs[0]), "nothing was applied"}},
		{"counts shorter than keys", append(good(0), msg{1, ids, keyRequest(mine[:2], 1)}),
			[]string{"trainer-1 sent a request for rows of dynamic table emb of 20 bytes, not whole keys and counts (12 bytes each)", "nothing was served"}},
		{"a count of zero", append(good(0), msg{1, ids, keyRequest([]int64{fresh[1]}, 0)}),
			[]string{fmt.Sprintf("trainer-1 sent key %d of dynamic table emb with a count of 0 sightings", fresh[1])}},
		{"the padding key", append(good(0), msg{1, ids, keyRequest([]int64{math.MinInt64}, 1)}),
			[]string{"trainer-1 sent the padding key in a request of dynamic table emb"}},
		{"more keys than the plan allows", append(good(0), msg{1, ids, make([]byte, 12*(3*batch+1))}),
			[]string{"from trainer-1", "300 bytes", "at most 288", "another split"}},
		{"gradient rows of the wrong width", append(good(0), msg{1, ids, keyRequest(mine[:1], 1)}, msg{1, grads, keyGrad(d-1, mine[0])}),
			[]string{"trainer-1 sent a row gradient of dynamic table emb of 20 bytes, not whole rows of width 4", "nothing was applied"}},
		{"gradient for a key of another shard", append(good(0), msg{1, ids, keyRequest(mine[:1], 1)}, msg{1, grads, keyGrad(d, mine[0], theirs[0])}),
			[]string{fmt.Sprintf("trainer-1 sent key %d in a row gradient of dynamic table emb to shard 0 of 2, but the key belongs to shard 1", theirs[0]), "nothing was applied"}},
	}
	for _, kind := range []string{"inmem", "tcp"} {
		for _, async := range []bool{false, true} {
			for _, c := range cases {
				t.Run(fmt.Sprintf("%s/async=%v/%s", kind, async, c.name), func(t *testing.T) {
					j := dynamicTableJob(t, 2, 2, async)
					rej := &rejections{}
					eps := jobEndpoints(t, kind, j, batch, rej)
					prog, tab, rt := dynamicPart(t, j, 0, eps[transport.PServer(0)], mine)
					before := shardState(t, tab)
					ctx := context.Background()
					grad := strings.Contains(c.name, "gradient")
					for _, m := range c.msgs {
						if async && m.from == 0 {
							continue // async: the bad piece alone (a good one would be applied, as it should)
						}
						tr := eps[transport.Trainer(m.from)]
						if err := tr.Send(ctx, transport.PServer(0), 0, m.v, transport.Rows, m.payload); err != nil {
							t.Fatal(err)
						}
						if err := tr.Flush(ctx); err != nil {
							t.Fatal(err)
						}
					}
					if grad {
						// The requests are good and served (their keys'
						// sightings counted), the gradients are not.
						before = ""
					}
					stop := hangWatch(t, 30*time.Second, "the pserver's step on bad input")
					err := prog.Run(rt)
					stop()
					if err == nil {
						t.Fatal("the step succeeded")
					}
					t.Log(err)
					for _, w := range c.want {
						if !strings.Contains(err.Error(), w) {
							t.Errorf("error %q does not say %q", err, w)
						}
					}
					if !grad {
						if after := shardState(t, tab); after != before {
							t.Errorf("the shard changed: a bad request was applied\nbefore %s\nafter  %s", before, after)
						}
					} else if rows := gatherRows(t, tab, mine); !slices.Equal(rows, initialRows(t, j, mine)) {
						t.Errorf("rows %v after a bad gradient, %v as admitted: a gradient was applied", rows, initialRows(t, j, mine))
					}
					if strings.Contains(c.name, "plan allows") && !strings.Contains(rej.String(), "trainer-1") {
						t.Errorf("the transport did not report the rejection naming trainer-1: %q", rej)
					}
				})
			}
		}
	}
}

// gatherRows is keys' rows and optimizer state in tab.
func gatherRows(t *testing.T, tab *dyntable.Table, keys []int64) []float32 {
	t.Helper()
	cfg := tab.Config()
	slots := make([]int32, len(keys))
	tab.Find(keys, slots)
	out := make([]float32, len(keys)*(cfg.Dim+cfg.StateWidth))
	if err := tab.Gather(slots, 0, cfg.Dim+cfg.StateWidth, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// initialRows is keys' rows and state as pserver-0's shard admits them.
func initialRows(t *testing.T, j *Job, keys []int64) []float32 {
	t.Helper()
	hub := transport.NewHub(func(error) {}, append(j.TrainerIDs(), j.PServerIDs()...)...)
	_, tab, _ := dynamicPart(t, j, 0, hub.Endpoint(transport.PServer(0)), keys)
	return gatherRows(t, tab, keys)
}

// A trainer whose pserver answers a request for keys of a dynamic table
// with rows of the wrong width, or more bytes than any request could
// need, fails naming that pserver.
func TestDynamicHostilePServerReply(t *testing.T) {
	const batch = 8 // the trainer fetches at most 24 keys (96 floats) per shard
	cases := []struct {
		name  string
		reply []byte // pserver-1's answer to a request for one key
		want  []string
	}{
		{"rows of width 5 for width 4", make([]byte, 4*5), []string{"pserver-1 answered 20 bytes for 1 keys of dynamic table emb (16 bytes)", "another plan"}},
		{"no rows for one key", nil, []string{"pserver-1 answered 0 bytes for 1 keys of dynamic table emb"}},
		{"more than any request", make([]byte, 4*96+4), []string{"from pserver-1", "388 bytes", "at most 384", "another split"}},
	}
	for _, kind := range []string{"inmem", "tcp"} {
		for _, c := range cases {
			t.Run(kind+"/"+c.name, func(t *testing.T) {
				j := dynamicTableJob(t, 1, 2, false)
				rej := &rejections{}
				eps := jobEndpoints(t, kind, j, batch, rej)
				prog, err := program.Compile(j.Trainer, program.CompileOptions{Batch: batch, Node: kernels.Node{Role: ir.TrainerRole}})
				if err != nil {
					t.Fatal(err)
				}
				defer prog.Close()
				key := shardKeys(1, 2, 1)[0] // every key: one row, of pserver-1
				for i := range prog.Scope["keys"].L {
					prog.Scope["keys"].L[i] = key
				}
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				prog.OnError = func(error) { cancel() }
				ts, err := j.Trainer.Transfers(batch, nil)
				if err != nil {
					t.Fatal(err)
				}
				c0 := comm.NewTrainer(comm.Config{EP: eps[transport.Trainer(0)], Trainers: 1, Transfers: ts}, j.PServerIDs())
				defer c0.Close()
				rt := &program.Runtime{Ctx: ctx, RV: c0}
				must := func(err error) {
					t.Helper()
					if err != nil {
						t.Fatal(err)
					}
				}
				for i, ps := range j.PServers {
					if ps.Vars["W"] != nil {
						w := make([]byte, 4*prog.Scope["W"].Numel())
						must(eps[transport.PServer(i)].Send(ctx, transport.Trainer(0), 0, "W", transport.F32, w))
					}
				}
				ps0, ps1 := eps[transport.PServer(0)], eps[transport.PServer(1)]
				must(ps0.Send(ctx, transport.Trainer(0), 0, ops.TableRows("emb"), transport.F32, nil)) // no keys of pserver-0
				must(ps1.Send(ctx, transport.Trainer(0), 0, ops.TableRows("emb"), transport.F32, c.reply))
				must(ps0.Flush(ctx))
				must(ps1.Flush(ctx))
				stop := hangWatch(t, 30*time.Second, "the trainer's step on a bad reply")
				err = prog.Run(rt)
				stop()
				if err == nil {
					t.Fatal("the step succeeded")
				}
				t.Log(err)
				for _, w := range c.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
			})
		}
	}
}
