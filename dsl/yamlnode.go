package dsl

import (
	"math"
	"sort"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
)

// decoder walks a yaml.Node tree, collecting positioned errors.
type decoder struct {
	file string
	errs ErrorList
	// dataDir is the directory the data section's paths are relative to.
	dataDir string
}

func (d *decoder) pos(n *yaml.Node) Pos {
	if n == nil {
		return Pos{File: d.file}
	}
	return Pos{File: d.file, Line: n.Line, Col: n.Column}
}

func (d *decoder) errorf(n *yaml.Node, format string, args ...any) {
	d.errs = append(d.errs, Errorf(d.pos(n), format, args...))
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if n.Tag == "!!null" {
			return "empty"
		}
		return strconv.Quote(n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "a document"
}

// smallMapping is the most keys fields checks for duplicates by a scan.
const smallMapping = 16

// fields iterates a mapping, rejecting keys not in allowed (nil: any key).
// It returns false if n is not a mapping.
func (d *decoder) fields(n *yaml.Node, what string, allowed []string, f func(key string, k, v *yaml.Node)) bool {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n, "%s must be a mapping, got %s", what, kindName(n))
		return false
	}
	// A duplicate key is found by a scan of the keys before it in a small
	// mapping (an op, a variable) and a set in a large one (params:).
	var seen map[string]bool
	if len(n.Content) > 2*smallMapping {
		seen = make(map[string]bool, len(n.Content)/2)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key := k.Value
		dup := false
		if seen != nil {
			dup = seen[key]
			seen[key] = true
		} else {
			for j := 0; j < i && !dup; j += 2 {
				dup = n.Content[j].Value == key
			}
		}
		if dup {
			d.errorf(k, "duplicate key %q in %s", key, what)
			continue
		}
		if allowed != nil && !contains(allowed, key) {
			sorted := append([]string{}, allowed...)
			sort.Strings(sorted)
			d.errorf(k, "unknown key %q in %s%s; allowed keys: %s", key, what, suggestAttr(key, allowed), strings.Join(sorted, ", "))
			continue
		}
		f(key, k, v)
	}
	return true
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func (d *decoder) str(n *yaml.Node, what string) (string, bool) {
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" || n.Value == "" {
		d.errorf(n, "%s must be a non-empty string, got %s", what, kindName(n))
		return "", false
	}
	return n.Value, true
}

func (d *decoder) integer(n *yaml.Node, what string) (int, bool) {
	if n.Kind == yaml.ScalarNode && n.Tag != "!!str" {
		if v, err := strconv.ParseInt(n.Value, 0, 64); err == nil && v >= math.MinInt32 && v <= math.MaxInt32*1024 {
			return int(v), true
		}
		if f, err := strconv.ParseFloat(n.Value, 64); err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<40 {
			return int(f), true
		}
	}
	d.errorf(n, "%s must be an integer, got %s", what, kindName(n))
	return 0, false
}

// int64 decodes an integer of the whole int64 range (an ids spec's fill
// of int64 keys), or a float with an integer value below 2^53.
func (d *decoder) int64(n *yaml.Node, what string) (int64, bool) {
	if n.Kind == yaml.ScalarNode && n.Tag != "!!str" {
		if v, err := strconv.ParseInt(n.Value, 0, 64); err == nil {
			return v, true
		}
		if f, err := strconv.ParseFloat(n.Value, 64); err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
			return int64(f), true
		}
	}
	d.errorf(n, "%s must be an integer, got %s", what, kindName(n))
	return 0, false
}

func (d *decoder) number(n *yaml.Node, what string) (float64, bool) {
	if n.Kind == yaml.ScalarNode && n.Tag != "!!str" {
		if f, err := strconv.ParseFloat(n.Value, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
			return f, true
		}
	}
	d.errorf(n, "%s must be a number, got %s", what, kindName(n))
	return 0, false
}

func (d *decoder) boolean(n *yaml.Node, what string) (bool, bool) {
	if n.Kind == yaml.ScalarNode && n.Tag == "!!bool" {
		return n.Value == "true" || n.Value == "True" || n.Value == "TRUE", true
	}
	d.errorf(n, "%s must be true or false, got %s", what, kindName(n))
	return false, false
}

func (d *decoder) list(n *yaml.Node, what string) ([]*yaml.Node, bool) {
	if n.Kind != yaml.SequenceNode {
		d.errorf(n, "%s must be a list, got %s", what, kindName(n))
		return nil, false
	}
	return n.Content, true
}

func (d *decoder) strings(n *yaml.Node, what string) ([]string, bool) {
	return listOf(d, n, what, d.str)
}

func (d *decoder) ints(n *yaml.Node, what string) ([]int, bool) {
	return listOf(d, n, what, d.integer)
}

// listOf decodes list n of what, each entry by item.
func listOf[T any](d *decoder, n *yaml.Node, what string, item func(*yaml.Node, string) (T, bool)) ([]T, bool) {
	items, ok := d.list(n, what)
	if !ok {
		return nil, false
	}
	out := make([]T, 0, len(items))
	for _, it := range items {
		v, ok := item(it, what+" entry")
		if !ok {
			return nil, false
		}
		out = append(out, v)
	}
	return out, true
}
