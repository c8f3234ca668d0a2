package data

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// A tfrecord or parquet reader's numbers given to the row parser as
// integers (typedInt, typedFloat) read into the row bit for bit as their
// text does (appendInt, appendFloat, as a CSV of them would): negative
// and huge int64s (beyond 18 digits, beyond float64's 53 bits), -0,
// float32 integers about 2^24, denormals, float32's extremes, the float32
// whose text reads back twice rounded, a million random float32 bit
// patterns, with transform: log and without; NaN and infinities are
// refused and give the text's error.
func TestTypedValuesReadAsTheirText(t *testing.T) {
	ints := []int64{0, 1, -1, 7, 1023, 1024, -1024, 123456789, 1<<53 + 1, -(1<<53 + 1), 999999999999999999, 1000000000000000000, -999999999999999999, math.MaxInt64, math.MinInt64, math.MinInt64 + 1}
	floats := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 0.1, -1.5, 3, 3e10, 16777216, 16777217, math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, 1.1754942e-38, 1e-10, 1023, 1024, -16777215, 16777215, -16777216, 1e6, 2.5e6, math.Float32frombits(0x15ae43fd),
		float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000000 {
		floats = append(floats, math.Float32frombits(rng.Uint32()))
	}
	for range 100000 {
		ints = append(ints, int64(rng.Uint64()), rng.Int64N(1<<20)-1<<19)
	}
	for _, transform := range []string{"", "log"} {
		t.Run("transform="+transform, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "x.tfrecords"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
			tr := ""
			if transform != "" {
				tr = ", transform: " + transform
			}
			spec := loadSpec(t, dir, "  tfrecord: x.tfrecords\n  names: [a, b]\n  features: {name: f, columns: a..b"+tr+"}\n")
			p := newRowParser(spec)
			b := newBinaryRow(spec, p)
			var out rowOut
			got, want := make([]float32, 2), make([]float32, 2)
			// read gives column 0 the value v (an int64 or a float32) as
			// text, or typed where the row takes it so, and column 1 the
			// integer 2 as text; it returns the row's feature of column 0.
			read := func(v any, typed bool, feat []float32) error {
				p.rowOut(&out, feat, nil, nil, nil, nil)
				b.start(64, 4)
				switch x := v.(type) {
				case int64:
					if !typed || !b.typedInt(0, x) {
						b.values = append(b.values, b.appendInt(x))
					}
				case float32:
					if !typed || !b.typedFloat(0, x) {
						b.values = append(b.values, b.appendFloat(float64(x), 32))
					}
				}
				if err := b.set(0, 0, p.where); err != nil {
					return err
				}
				b.values = append(b.values, b.appendInt(2))
				if err := b.set(1, 1, p.where); err != nil {
					return err
				}
				return p.parseFields(1, &out)
			}
			check := func(v any) {
				t.Helper()
				errT, errS := read(v, true, got), read(v, false, want)
				if fmt.Sprint(errT) != fmt.Sprint(errS) {
					t.Fatalf("%v: typed gives error %v, text %v", v, errT, errS)
				}
				if errS == nil && (math.Float32bits(got[0]) != math.Float32bits(want[0]) || got[1] != want[1]) {
					t.Fatalf("%v: typed reads %v (%#x), text %v (%#x)", v, got, math.Float32bits(got[0]), want, math.Float32bits(want[0]))
				}
			}
			for _, x := range ints {
				check(x)
			}
			for _, x := range floats {
				check(x)
			}
			// the checks compared something: NaN is an error both ways, 1.5 a value
			if err := read(float32(math.NaN()), true, got); err == nil {
				t.Fatal("NaN read as a value, want the text's error")
			}
			if err := read(int64(-3), true, got); err != nil || !p.typed[0].typed {
				t.Fatalf("an int64 of a features column went as text (%v)", err)
			}
			if err := read(float32(-7), true, got); err != nil || !p.typed[0].typed {
				t.Fatalf("an integer float32 of a features column went as text (%v)", err)
			}
			if err := read(float32(1.5), true, got); err != nil || p.typed[0].typed {
				t.Fatalf("1.5 went as an integer (%v)", err)
			}
		})
	}
}
