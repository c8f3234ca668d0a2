package parquetschema

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Names lists the columns of the parquet file at path.
func Names(path string) ([]string, error) {
	names, _, err := Columns(path)
	return names, err
}

// Columns lists the columns of the parquet file at path (its top-level
// fields, in order) and, for each, the index of its leaf column in a row
// group; a field with several leaves (a struct, a map) is an error naming
// it. It reads the file's footer (the schema), not its data.
func Columns(path string) (names []string, leaf []int, err error) {
	footer, err := readFooter(path)
	if err != nil {
		return nil, nil, err
	}
	elems, err := decodeSchema(footer)
	if err != nil {
		return nil, nil, fmt.Errorf("not a parquet file that can be read: %v", err)
	}
	return Fields(elems)
}

// maxFooter bounds the footer read: a schema of a million columns fits.
const maxFooter = 1 << 28

// readFooter reads a parquet file's footer: the thrift-encoded
// FileMetaData before its last 8 bytes (the footer's length, "PAR1").
func readFooter(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var tail [8]byte
	if st.Size() < 12 {
		return nil, fmt.Errorf("not a parquet file that can be read: %d bytes, fewer than a parquet file's 12", st.Size())
	}
	if _, err := f.ReadAt(tail[:], st.Size()-8); err != nil {
		return nil, err
	}
	head := make([]byte, 4)
	if _, err := f.ReadAt(head, 0); err != nil {
		return nil, err
	}
	if string(tail[4:]) != "PAR1" || string(head) != "PAR1" {
		return nil, errors.New(`not a parquet file that can be read: it does not begin and end with "PAR1"`)
	}
	n := int64(binary.LittleEndian.Uint32(tail[:4]))
	if n > st.Size()-12 || n > maxFooter {
		return nil, fmt.Errorf("not a parquet file that can be read: its footer's length %d is past the file's %d bytes", n, st.Size())
	}
	footer := make([]byte, n)
	if _, err := f.ReadAt(footer, st.Size()-8-n); err != nil {
		return nil, err
	}
	return footer, nil
}

// Element is a SchemaElement of a footer: a node of the schema's tree,
// listed depth first (the root first); a leaf has no children.
type Element struct {
	Name     string
	Children int
	Group    bool // no type: a node of other nodes (Children may be 0)
}

// Fields is Columns of a schema's elements, for a reader that decoded
// the footer itself (exec/data, with parquet-go, which reads the footer
// once for both): the root's fields and their leaf columns (numbered
// depth first, as a row group's column chunks).
func Fields(elems []Element) (names []string, leaf []int, err error) {
	if len(elems) == 0 {
		return nil, nil, errors.New("not a parquet file that can be read: its schema is empty")
	}
	for _, e := range elems {
		if e.Children < 0 {
			return nil, nil, fmt.Errorf("not a parquet file that can be read: its schema's %q has %d children", e.Name, e.Children)
		}
	}
	next := 1
	var leaves [][]string // every leaf's path, depth first
	// walk consumes the subtree at next, appending its leaves' paths.
	var walk func(path []string, depth int) error
	walk = func(path []string, depth int) error {
		if next >= len(elems) {
			return errors.New("not a parquet file that can be read: its schema lists fewer elements than its nodes' children")
		}
		if depth > 100 {
			return errors.New("not a parquet file that can be read: its schema is nested more than 100 deep")
		}
		e := elems[next]
		next++
		path = append(path[:len(path):len(path)], e.Name)
		if !e.Group {
			if e.Children != 0 {
				return fmt.Errorf("not a parquet file that can be read: its schema's %q has a type and %d children", e.Name, e.Children)
			}
			leaves = append(leaves, path)
			return nil
		}
		for range e.Children {
			if err := walk(path, depth+1); err != nil {
				return err
			}
		}
		return nil
	}
	for range elems[0].Children {
		at, first := next, len(leaves)
		if err := walk(nil, 1); err != nil {
			return nil, nil, err
		}
		name, own := elems[at].Name, leaves[first:]
		switch {
		case len(own) == 0:
			return nil, nil, fmt.Errorf("column %q holds no values", name)
		case len(own) > 1:
			return nil, nil, fmt.Errorf("column %q holds several values (%s and %s): psgraph reads columns of one value or a list of values; select or flatten it when writing the file", name, strings.Join(own[0], "."), strings.Join(own[1], "."))
		}
		names, leaf = append(names, name), append(leaf, first)
	}
	if next != len(elems) {
		return nil, nil, fmt.Errorf("not a parquet file that can be read: its schema lists %d elements, its tree %d", len(elems), next)
	}
	return names, leaf, nil
}
