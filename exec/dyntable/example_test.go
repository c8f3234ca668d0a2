package dyntable_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/psgraph/psgraph/exec/dyntable"
)

// A shard's life: rows created by admission, read and updated by slot,
// expired by ttl, checkpointed as a snapshot and a delta, restored.
func Example() {
	cfg := dyntable.Config{
		Dim: 2, StateWidth: 2, StateInit: []float32{0.1, 0.1}, // adagrad, initial accumulator 0.1
		Seed: 1, Init: dyntable.Init{Kind: dyntable.Constant, Value: 0.5},
		MinCount: 2, // a key gets a row at its second sighting
		TTL:      3, // and loses it after 3 steps unseen
	}
	tab, err := dyntable.New(cfg)
	if err != nil {
		panic(err)
	}
	keys := []int64{10, 20}
	slots := make([]int32, 2)
	values := make([]float32, 4)
	for step := range int64(2) {
		tab.Advance(step)
		tab.Pull(keys, nil, slots, values)
		fmt.Println("step", step, "slots", slots, "values", values)
	}
	// An optimizer step on the rows: gather value and state, update, scatter.
	rows := make([]float32, 2*4)
	tab.Gather(slots, 0, 4, rows)
	for i := range 2 {
		rows[i*4] -= 0.25 // value column 0
		rows[i*4+2] += 1  // its accumulator
	}
	tab.Scatter(slots, 0, 4, rows)

	dir, _ := os.MkdirTemp("", "dyntable")
	defer os.RemoveAll(dir)
	write := func(kind dyntable.Kind, name string) {
		f, _ := os.Create(filepath.Join(dir, name))
		defer f.Close()
		c, _ := tab.Cut(kind)
		if _, err := c.WriteSafetensors(f, "emb", dyntable.Checkpoint); err != nil {
			c.Abort()
			panic(err)
		}
		c.Commit()
	}
	write(dyntable.Snapshot, "snap")
	tab.Advance(5) // keys 10 and 20 expire
	tab.Lookup([]int64{30}, []uint32{2}, slots[:1])
	write(dyntable.Delta, "delta")
	s := tab.Stats()
	fmt.Println("live", s.Live, "admitted", s.Admitted, "expired", s.EvictedTTL)

	restored, _ := dyntable.New(cfg)
	for _, name := range []string{"snap", "delta"} {
		f, _ := os.Open(filepath.Join(dir, name))
		fi, _ := f.Stat()
		if err := restored.Apply(f, fi.Size(), "emb"); err != nil {
			panic(err)
		}
		f.Close()
	}
	restored.Read([]int64{10, 30}, values)
	fmt.Println("restored: key 10 reads", values[:2], "key 30 reads", values[2:])
	// Output:
	// step 0 slots [-1 -1] values [0 0 0 0]
	// step 1 slots [0 1] values [0.5 0.5 0.5 0.5]
	// live 1 admitted 3 expired 2
	// restored: key 10 reads [0 0] key 30 reads [0.5 0.5]
}
