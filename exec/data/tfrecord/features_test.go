package tfrecord

import (
	"testing"
)

// field is a length-delimited protocol buffer field of fewer than 128 bytes.
func field(num int, p []byte) []byte { return append([]byte{byte(num<<3 | 2), byte(len(p))}, p...) }

// ctrRecord is a tf.Example of the CTR example's shape, as write_tfrecord.py
// writes psgraph gen criteo's rows: 14 int64_list features of one value
// (the label and 13 counts), 26 bytes_list ones of 8 bytes, keys of 1 to
// 5 bytes; the first count's value is of two bytes.
func ctrRecord() []byte {
	var feats []byte
	for i := 0; i < 40; i++ {
		key := []byte("C" + string(rune('A'+i%26)) + string(rune('0'+i/26)))
		if i == 0 {
			key = []byte("label")
		}
		var feat []byte
		switch {
		case i == 1:
			feat = field(3, field(1, []byte{0x96, 0x01}))
		case i < 14:
			feat = field(3, field(1, []byte{byte(i + 1)}))
		default:
			feat = field(1, field(1, []byte("68fd1e64")))
		}
		feats = append(feats, field(1, append(field(1, key), field(2, feat)...))...)
	}
	return append([]byte{0x0a, byte(len(feats)&0x7f | 0x80), byte(len(feats) >> 7)}, feats...)
}

// BenchmarkDecode reads a record of the CTR example's shape (ctrRecord)
// as a TFRecord row does: decode, by Keys.Decode into a Sink (every
// feature's one value straight into its slot, as tfrecordSource reads
// it), the keys learnt from the record before; features, by Features.Next
// feature by feature (the way any other layout is read). ns/feature is the
// time a feature.
func BenchmarkDecode(b *testing.B) {
	rec := ctrRecord()
	b.Run("decode", func(b *testing.B) {
		slots := map[string]int{}
		k := NewKeys(func(key []byte) int {
			if _, ok := slots[string(key)]; !ok {
				slots[string(key)] = len(slots)
			}
			return slots[string(key)]
		})
		sink := &Sink{Raw: make([][]byte, 40), Int: make([]int64, 40), Got: make([]bool, 40), IntOK: make([]bool, 40)}
		for i := range sink.IntOK {
			sink.IntOK[i] = true
		}
		var out []Value
		if _, err := k.Decode(rec, nil, sink); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			clear(sink.Got)
			out, _ = k.Decode(rec, out[:0], sink)
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(40*b.N), "ns/feature")
		if len(out) != 0 || !sink.Got[13] || sink.Int[1] != 150 || string(sink.Raw[39]) != "68fd1e64" {
			b.Fatalf("%d values left to out; int %v %d, raw %q", len(out), sink.Got[13], sink.Int[1], sink.Raw[39])
		}
	})
	b.Run("features", func(b *testing.B) {
		b.ReportAllocs()
		n := 0
		for i := 0; i < b.N; i++ {
			fs := NewFeatures(rec)
			var f Feature
			for {
				ok, _ := fs.Next(&f)
				if !ok {
					break
				}
				n += len(f.Key)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(40*b.N), "ns/feature")
		if n != b.N*(40*3+2) {
			b.Fatal(n)
		}
	})
}
