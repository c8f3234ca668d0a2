package tfrecord_test

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/exec/data/tfrecord"
	"github.com/psgraph/psgraph/internal/testfix"
)

// records reads every record of b (a copy each) or the first error.
func records(t *testing.T, b []byte) ([][]byte, error) {
	return recordsBuffered(t, b, 4096)
}

// recordsBuffered is records through a buffer of size bytes: records
// longer are copied out of it, the others read in place.
func recordsBuffered(t *testing.T, b []byte, size int) ([][]byte, error) {
	t.Helper()
	r, err := tfrecord.NewReader(bytes.NewReader(b), bufio.NewReaderSize(nil, size))
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for {
		rec, err := r.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, bytes.Clone(rec))
	}
}

// Records an independent writer framed (write_tfrecord.py: pure Python,
// its own CRC-32C) read back plain and gzipped, each a tf.Example whose
// features come out with their keys and kinds; a flipped byte or a cut
// file is an error naming the record, never a wrong row.
func TestReaderReadsAnIndependentWritersRecords(t *testing.T) {
	dir := t.TempDir()
	testfix.WriteTFRecord(t, "criteo", testfix.DeepCTR(t, dir, "criteo_sample.txt"), dir)
	plain, err := os.ReadFile(filepath.Join(dir, "criteo.tfrecords"))
	if err != nil {
		t.Fatal(err)
	}
	gz, err := os.ReadFile(filepath.Join(dir, "criteo.tfrecords.gz"))
	if err != nil {
		t.Fatal(err)
	}
	recs, err := records(t, plain)
	if err != nil || len(recs) != 200 {
		t.Fatalf("%d records, error %v; want 200", len(recs), err)
	}
	zrecs, err := records(t, gz)
	if err != nil || len(zrecs) != len(recs) || !bytes.Equal(zrecs[199], recs[199]) {
		t.Fatalf("gzipped: %d records, error %v", len(zrecs), err)
	}
	// write_tfrecord.py writes C1..C26 (int64_list), I1..I13 (float_list), label (float_list)
	fs := tfrecord.NewFeatures(recs[0])
	var keys []string
	var f tfrecord.Feature
	for {
		ok, err := fs.Next(&f)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		key, vals := f.Key, f.Values()
		want := tfrecord.Int64
		if key[0] != 'C' {
			want = tfrecord.Float
		}
		if n, err := vals.Len(); vals.Kind != want || n != 1 || err != nil {
			t.Errorf("feature %s: %v of %d values (%v), want one %v", key, vals.Kind, n, err, want)
		}
		keys = append(keys, string(key))
	}
	if len(keys) != 40 || keys[0] != "C1" || keys[39] != "label" {
		t.Errorf("keys %v", keys)
	}

	// through a buffer smaller than a record: each copied, the same bytes;
	// a cut one an error
	small, err := recordsBuffered(t, plain, 16)
	if err != nil || len(small) != 200 || !bytes.Equal(small[0], recs[0]) || !bytes.Equal(small[199], recs[199]) {
		t.Fatalf("through a small buffer: %d records, error %v", len(small), err)
	}
	if got, err := recordsBuffered(t, plain[:len(plain)-3], 16); !errors.Is(err, tfrecord.ErrCorrupt) || !strings.Contains(err.Error(), "record 200: the file ends inside it") || len(got) != 199 {
		t.Errorf("a cut file through a small buffer: %d records, error %v", len(got), err)
	}

	flipped := bytes.Clone(plain)
	at := len(plain) / 2
	flipped[at] ^= 0x10
	got, err := records(t, flipped)
	if !errors.Is(err, tfrecord.ErrCorrupt) || !strings.Contains(err.Error(), "checksum") || len(got) >= 200 {
		t.Errorf("a flipped byte: %d records, error %v", len(got), err)
	}
	got, err = records(t, plain[:len(plain)-3])
	if !errors.Is(err, tfrecord.ErrCorrupt) || !strings.Contains(err.Error(), "record 200: the file ends inside it") || len(got) != 199 {
		t.Errorf("a cut file: %d records, error %v", len(got), err)
	}
	if _, err := records(t, []byte("label,I1\n1,2\n3,4\n")); !errors.Is(err, tfrecord.ErrCorrupt) || !strings.Contains(err.Error(), "is this a TFRecord file?") {
		t.Errorf("a CSV read as TFRecords: %v", err)
	}
}
