package tfrecord

import "testing"

// field is a length-delimited protocol buffer field of fewer than 128 bytes.
func field(num int, p []byte) []byte { return append([]byte{byte(num<<3 | 2), byte(len(p))}, p...) }

// BenchmarkFeatures walks a tf.Example of the CTR example's shape (14
// int64_list features, 26 bytes_list ones of 8 bytes): the decoding a
// TFRecord row costs before the row parser.
func BenchmarkFeatures(b *testing.B) {
	var feats []byte
	for i := 0; i < 40; i++ {
		key := []byte("C" + string(rune('A'+i%26)) + string(rune('0'+i/26)))
		var feat []byte
		if i < 14 {
			feat = field(3, field(1, []byte{byte(i + 1)}))
		} else {
			feat = field(1, field(1, []byte("68fd1e64")))
		}
		feats = append(feats, field(1, append(field(1, key), field(2, feat)...))...)
	}
	rec := []byte{0x0a, byte(len(feats)&0x7f | 0x80), byte(len(feats) >> 7)}
	rec = append(rec, feats...)
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
	if n != b.N*40*3 {
		b.Fatal(n)
	}
}
