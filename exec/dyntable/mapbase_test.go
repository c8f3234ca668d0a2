package dyntable

import "testing"

// BenchmarkGoMapBaseline looks the batches of BenchmarkLookup up in a Go
// map of 2M int64 keys to int32: the yardstick of the machine's memory.
func BenchmarkGoMapBaseline(b *testing.B) {
	sharedTable(b)
	m := make(map[int64]int32, benchRows)
	for r := range benchRows {
		m[benchKey(uint64(r))] = int32(r)
	}
	keys := 0
	var sum int32
	clk := startCPU(b)
	for i := range b.N {
		ks := benchShared.batches[i%len(benchShared.batches)]
		for _, k := range ks {
			sum += m[k]
		}
		keys += len(ks)
	}
	clk.report(b, keys)
	if sum == 1 {
		b.Log(sum)
	}
}

// BenchmarkFindOnly resolves BenchmarkLookup's batches without counting
// or touching them: the index and the record's key, as a Go map's lookup.
func BenchmarkFindOnly(b *testing.B) {
	tab := sharedTable(b)
	slots := make([]int32, benchBatch)
	keys := 0
	clk := startCPU(b)
	for i := range b.N {
		ks := benchShared.batches[i%len(benchShared.batches)]
		tab.Find(ks, slots)
		keys += len(ks)
	}
	clk.report(b, keys)
}
