package data

import (
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/internal/testfix"
)

// A tfrecord or parquet reader's numbers given to the row parser as
// integers (typedInt, typedFloat) read into the row bit for bit as their
// text does (appendInt, appendFloat, as a CSV of them would): negative
// and huge int64s (beyond 18 digits, beyond float64's 53 bits), -0,
// float32 integers about 2^24, denormals, float32's extremes, the float32
// whose text reads back twice rounded, a million random float32 bit
// patterns, with transform: log and without; NaN and infinities are
// refused and give the text's error. The default run draws 100,000 random
// float32s and 2 x 10,000 random int64s beside the edge cases above;
// TestTypedValuesReadAsTheirTextMillion (-long) a million and 2 x 100,000.
func TestTypedValuesReadAsTheirText(t *testing.T) {
	typedValuesReadAsTheirText(t, 100000, 10000)
}

func TestTypedValuesReadAsTheirTextMillion(t *testing.T) {
	testfix.Long(t)
	typedValuesReadAsTheirText(t, 1000000, 100000)
}

// typedValuesReadAsTheirText checks the edge cases and randFloats random
// float32 bit patterns and 2 x randInts random int64s.
func typedValuesReadAsTheirText(t *testing.T, randFloats, randInts int) {
	ints := []int64{0, 1, -1, 7, 1023, 1024, -1024, 123456789, 1<<53 + 1, -(1<<53 + 1), 999999999999999999, 1000000000000000000, -999999999999999999, math.MaxInt64, math.MinInt64, math.MinInt64 + 1}
	floats := []float32{0, float32(math.Copysign(0, -1)), 1, -1, 0.1, -1.5, 3, 3e10, 16777216, 16777217, math.MaxFloat32, -math.MaxFloat32, math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32, 1.1754942e-38, 1e-10, 1023, 1024, -16777215, 16777215, -16777216, 1e6, 2.5e6, math.Float32frombits(0x15ae43fd),
		float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))}
	rng := rand.New(rand.NewPCG(1, 2))
	for range randFloats {
		floats = append(floats, math.Float32frombits(rng.Uint32()))
	}
	for range randInts {
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
				if err := giveRow(b, v, typed); err != nil {
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
			if err := read(int64(-3), true, got); err != nil || !p.isInt[0] {
				t.Fatalf("an int64 of a features column went as text (%v)", err)
			}
			if err := read(float32(-7), true, got); err != nil || !p.isInt[0] {
				t.Fatalf("an integer float32 of a features column went as text (%v)", err)
			}
			if err := read(float32(1.5), true, got); err != nil || p.isInt[0] {
				t.Fatalf("1.5 went as an integer (%v)", err)
			}
		})
	}
}

// A parquet file's booleans, signed and unsigned integers and floats
// (negative, int64's extremes, -0, NaN, infinities, fractions) read into
// the same rows (or the same errors) given to the row parser as numbers
// as given as text, with transform: log and without.
func TestParquetTypedValuesReadAsTheirText(t *testing.T) {
	dir := t.TempDir()
	testfix.WriteParquet(t, filepath.Join(dir, "t.parquet"), 3, "SELECT * FROM (VALUES "+
		"(true, CAST(-5 AS INTEGER), CAST(7 AS UINTEGER), CAST(9223372036854775807 AS BIGINT), CAST(1.5 AS FLOAT), CAST(3 AS FLOAT)), "+
		"(false, CAST(-2147483648 AS INTEGER), CAST(4294967295 AS UINTEGER), CAST(-9223372036854775808 AS BIGINT), CAST(-0.0 AS FLOAT), CAST(16777215 AS FLOAT)), "+
		"(true, CAST(0 AS INTEGER), CAST(1023 AS UINTEGER), CAST(-1 AS BIGINT), CAST(7.038531e-26 AS FLOAT), CAST(3e10 AS FLOAT)), "+
		"(false, CAST(1024 AS INTEGER), CAST(0 AS UINTEGER), CAST(123456789012345678 AS BIGINT), CAST('nan' AS FLOAT), CAST(-1e6 AS FLOAT)), "+
		"(true, CAST(1 AS INTEGER), CAST(2 AS UINTEGER), CAST(3 AS BIGINT), CAST('inf' AS FLOAT), CAST('-inf' AS FLOAT))"+
		") t(b, i, u, l, f, g)")
	for _, tr := range []string{"", ", transform: log"} {
		spec := loadSpec(t, dir, "  parquet: t.parquet\n  features: {name: x, columns: [b, i, u, l, f, g]"+tr+"}\n")
		read := func(typed bool) (rows [][]float32, errs []string) {
			p := newRowParser(spec)
			src, err := openSource(spec, p, StreamBuffer)
			if err != nil {
				t.Fatal(err)
			}
			defer src.close()
			if !typed {
				clear(src.(*parquetSource).b.typable)
			}
			var out rowOut
			for {
				feat := make([]float32, 6)
				p.rowOut(&out, feat, nil, nil, nil, nil)
				ok, err := src.row(&out)
				if !ok && err == nil {
					return rows, errs
				}
				rows, errs = append(rows, feat), append(errs, fmt.Sprint(err))
				if p.isInt[0] != typed {
					t.Fatalf("typed %v: a boolean went typed %v", typed, p.isInt[0])
				}
			}
		}
		got, gotErr := read(true)
		want, wantErr := read(false)
		if len(got) != 5 || len(want) != 5 {
			t.Fatalf("%d and %d rows, want 5", len(got), len(want))
		}
		for r := range want {
			if gotErr[r] != wantErr[r] {
				t.Fatalf("transform%q row %d: typed gives error %s, text %s", tr, r, gotErr[r], wantErr[r])
			}
			for k := range want[r] {
				if wantErr[r] == "<nil>" && math.Float32bits(got[r][k]) != math.Float32bits(want[r][k]) {
					t.Fatalf("transform%q row %d: typed %v, text %v", tr, r, got[r], want[r])
				}
			}
		}
		if wantErr[3] == "<nil>" || wantErr[0] != "<nil>" || want[1][4] != 0 || math.Signbit(float64(want[1][4])) {
			t.Fatalf("transform%q: the text path's rows %v, errors %q: want NaN an error, -0 read as 0", tr, want, wantErr)
		}
	}
}

// giveRow gives the row of b column 0 the value v (an int64 or a
// float32) as text, or typed where the row takes it so, and column 1 the
// integer 2 as text.
func giveRow(b *binaryRow, v any, typed bool) error {
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
	if err := b.set(0, 0, b.p.where); err != nil {
		return err
	}
	b.values = append(b.values, b.appendInt(2))
	return b.set(1, 1, b.p.where)
}

// A tfrecord or parquet reader's integer label given to the row parser as
// an integer reads as its text does, to the same class or target or the
// same error: a class id (negative and past int32: the text's error), a
// threshold's class and a float target, for int64s and integer float32s;
// a positive: label takes its column as text.
func TestTypedLabelsReadAsTheirText(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "x.tfrecords"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	ints := []int64{0, 1, 7, -1, math.MaxInt32, math.MaxInt32 + 1, 1<<53 + 1, math.MaxInt64, math.MinInt64, 4, 5, 6}
	floats := []float32{0, 1, 3, -2, 16777215, float32(math.Copysign(0, -1))}
	for _, label := range []string{"{name: y, column: a}", "{name: y, column: a, threshold: 5}", "{name: y, column: a, dtype: float32}", "{name: y, column: a, positive: \"7\"}"} {
		spec := loadSpec(t, dir, "  tfrecord: x.tfrecords\n  names: [a, b]\n  features: {name: f, columns: [b]}\n  label: "+label+"\n")
		p := newRowParser(spec)
		b := newBinaryRow(spec, p)
		var out rowOut
		// read gives column 0 the value v as text or typed where the row
		// takes it so, column 1 the integer 2; it returns the label, a
		// class id or a float target, as float64.
		read := func(v any, typed bool) (float64, error) {
			var class int32
			tgt, feat := make([]float32, 1), make([]float32, 1)
			p.rowOut(&out, feat, &class, tgt, nil, nil)
			if !spec.Label.Float {
				out.tgt = nil
			}
			if err := giveRow(b, v, typed); err != nil {
				return 0, err
			}
			err := p.parseFields(1, &out)
			if spec.Label.Float {
				return float64(tgt[0]), err
			}
			return float64(class), err
		}
		for _, v := range append([]any{int64(0)}, func() (vs []any) {
			for _, x := range ints {
				vs = append(vs, x)
			}
			for _, x := range floats {
				vs = append(vs, x)
			}
			return vs
		}()...) {
			got, errT := read(v, true)
			want, errS := read(v, false)
			if fmt.Sprint(errT) != fmt.Sprint(errS) || got != want {
				t.Fatalf("label %s, %v: typed reads %v (%v), text %v (%v)", label, v, got, errT, want, errS)
			}
		}
		wantTyped := !strings.Contains(label, "positive")
		if _, err := read(int64(7), true); err != nil || p.isInt[0] != wantTyped {
			t.Fatalf("label %s: 7 typed %v (%v), want %v", label, p.isInt[0], err, wantTyped)
		}
	}
}
