package parquetschema

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
)

// writeSchema writes a parquet file of no rows with the schema root (by
// parquet-go, an independent writer) and returns its path.
func writeSchema(t testing.TB, dir, name string, root parquet.Node) string {
	t.Helper()
	var buf bytes.Buffer
	w := parquet.NewWriter(&buf, parquet.NewSchema("root", root))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// parquetGoColumns is Columns as parquet-go reads the footer: the
// root's fields, and for each its one leaf column's index.
func parquetGoColumns(t *testing.T, path string) (names []string, leaf []int, several bool) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pf, err := parquet.OpenFile(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	paths := pf.Schema().Columns()
	for _, fd := range pf.Schema().Fields() {
		var at []int
		for i, p := range paths {
			if p[0] == fd.Name() {
				at = append(at, i)
			}
		}
		if len(at) != 1 {
			return nil, nil, true
		}
		names, leaf = append(names, fd.Name()), append(leaf, at[0])
	}
	return names, leaf, false
}

// Columns reads from a file's footer the columns and leaf indices
// parquet-go finds in it (values, optional values, lists, and fields
// after nested ones), and refuses a field of several leaves naming two.
func TestColumnsAsParquetGoReadsThem(t *testing.T) {
	dir := t.TempDir()
	str := parquet.String()
	i64 := parquet.Leaf(parquet.Int64Type)
	cases := []struct {
		name    string
		root    parquet.Node
		refused string // in the error, for a field of several leaves
	}{
		{"flat", parquet.Group{"label": i64, "I1": parquet.Optional(parquet.Leaf(parquet.DoubleType)), "C1": str, "flag": parquet.Leaf(parquet.BooleanType)}, ""},
		{"lists", parquet.Group{"a": i64, "genres": parquet.List(str), "z": parquet.Optional(parquet.List(parquet.Leaf(parquet.FloatType)))}, ""},
		{"repeated", parquet.Group{"ids": parquet.Repeated(i64), "y": i64}, ""},
		{"struct", parquet.Group{"a": i64, "s": parquet.Group{"x": i64, "y": str}, "z": i64}, `column "s" holds several values (s.x and s.y)`},
		{"map", parquet.Group{"m": parquet.Map(str, i64), "z": i64}, `column "m" holds several values (m.key_value.key and m.key_value.value)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := writeSchema(t, dir, c.name+".parquet", c.root)
			names, leaf, err := Columns(p)
			wantNames, wantLeaf, several := parquetGoColumns(t, p)
			if c.refused != "" {
				if !several {
					t.Fatal("parquet-go finds one leaf a field: the case tests nothing")
				}
				if err == nil || !strings.Contains(err.Error(), c.refused) {
					t.Fatalf("err %v, want one saying %s", err, c.refused)
				}
				return
			}
			if err != nil || several {
				t.Fatalf("err %v (parquet-go: several leaves a field %v)", err, several)
			}
			if !slices.Equal(names, wantNames) || !slices.Equal(leaf, wantLeaf) {
				t.Fatalf("names %v leaves %v, parquet-go %v %v", names, leaf, wantNames, wantLeaf)
			}
		})
	}
}

// A file cut short anywhere, or with bytes of its footer changed, is an
// error (or, for a change that leaves a schema, some columns): never a
// panic, a hang or a huge allocation.
func TestDamagedFootersAreErrors(t *testing.T) {
	dir := t.TempDir()
	p := writeSchema(t, dir, "good.parquet", parquet.Group{"a": parquet.Leaf(parquet.Int64Type), "b": parquet.List(parquet.String()), "s": parquet.Group{"x": parquet.String()}})
	good, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.parquet")
	for n := 0; n < len(good); n++ {
		os.WriteFile(bad, good[:n], 0o644)
		if _, _, err := Columns(bad); err == nil {
			t.Fatalf("the file's first %d of %d bytes: no error", n, len(good))
		}
	}
	for i := 4; i < len(good)-8; i++ {
		for _, x := range []byte{0x00, 0xff, 0x15, 0x19, 0x1c, 0x7f} {
			b := slices.Clone(good)
			b[i] = x
			os.WriteFile(bad, b, 0o644)
			Columns(bad)
		}
	}
	if _, _, err := Columns(filepath.Join(dir, "missing.parquet")); err == nil {
		t.Error("a missing file: no error")
	}
}

func FuzzFooter(f *testing.F) {
	f.Add([]byte{0x19, 0x1c, 0x48, 0x04, 'r', 'o', 'o', 't', 0x15, 0x02, 0x00, 0x15, 0x04, 0x18, 0x01, 'a', 0x00, 0x00})
	f.Fuzz(func(t *testing.T, footer []byte) {
		if elems, err := decodeSchema(footer); err == nil {
			Fields(elems)
		}
	})
}

// Fields refuses a node of fewer than no children, which a reader other
// than this package's (Columns refuses it as it decodes) may hand over.
func TestFieldsRefusesNegativeChildren(t *testing.T) {
	for _, c := range []struct {
		elems []Element
		want  string
	}{
		{[]Element{{Name: "root", Children: -1, Group: true}}, `"root" has -1 children`},
		{[]Element{{Name: "root", Children: 1, Group: true}, {Name: "s", Children: -2, Group: true}}, `"s" has -2 children`},
	} {
		if names, _, err := Fields(c.elems); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: columns %v, err %v; want one saying %s", c.elems, names, err, c.want)
		}
	}
}
