package data

import (
	"bytes"
	"testing"
)

// BenchmarkLineParse parses rows of a generated Criteo file one line at a
// time, as psgraph serve parses a request's rows: split, 13 features
// (log), 26 hashed ids. ns/row is the time a row:
// go test ./exec/data -run X -bench LineParse
func BenchmarkLineParse(b *testing.B) {
	g := loadModel(b, "train.tsv", criteoFile(b, 10, 5, false), criteoSpec)
	lp, err := NewLineParser(g.Data, nil)
	if err != nil {
		b.Fatal(err)
	}
	lines := bytes.Split(bytes.TrimSuffix([]byte(criteoFile(b, 1000, 1, false)), []byte("\n")), []byte("\n"))
	bt := newBatch(lp.Spec(), 1)
	b.ReportAllocs()
	for b.Loop() {
		for i, l := range lines {
			if err := lp.Parse(l, i, bt.all, 0); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(b.Elapsed().Seconds()*1e9/float64(b.N*len(lines)), "ns/row")
}
