package partition_test

import (
	"fmt"

	"github.com/psgraph/psgraph/dsl"
	"github.com/psgraph/psgraph/partition"
)

// Split places the digits model for 2 trainers and 2 pservers.
func ExampleSplit() {
	g, err := dsl.Load("../examples/digits-mlp.yaml")
	if err != nil {
		fmt.Println(err)
		return
	}
	p, err := partition.Split(g, partition.Options{Trainers: 2, PServers: 2, Mode: partition.Sync})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(p.Summary())
	// Output:
	// split digits-mlp: 2 trainers (sync), 2 pservers, min block size 1048576 elements
	//   W1           [64, 128]      32.0 KiB  -> pserver:0 (whole: 8192 elements <= min_block_size 1048576)
	//   W2           [128, 10]       5.0 KiB  -> pserver:1 (whole: 1280 elements <= min_block_size 1048576)
	//   b1           [128]             512 B  -> pserver:1 (whole: 128 elements <= min_block_size 1048576)
	//   b2           [10]               40 B  -> pserver:1 (whole: 10 elements <= min_block_size 1048576)
	// pserver:0: 32.0 KiB in 1 blocks
	// pserver:1: 5.5 KiB in 3 blocks
	// send/recv pairs: 8 (4 parameter blocks to the trainers, 4 gradient blocks to the pservers)
}
