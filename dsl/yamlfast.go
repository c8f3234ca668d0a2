package dsl

import (
	"gopkg.in/yaml.v3"
)

// The fast path below reads the lines a large model is made of, one flow
// collection per entry as psgraph split and most generators write them:
//
//	  - {type: matmul, inputs: [x, W0], outputs: [m0], attrs: {transpose_a: false}}
//	  W0: {shape: [8, 8], init: {type: he_normal}}
//
// into the nodes yaml.v3 builds for them, several times faster. It takes
// only a strict subset: plain scalars of letters, digits and _@.$-+/ that
// are strings, decimal integers, plain decimals or true/false, and
// double-quoted strings without escapes, in flow
// mappings and sequences on one line, ASCII, no comments. Anything else
// (quotes, other scalars that yaml.v3 might type differently, anchors,
// multi-line entries) makes the piece go to yaml.v3
// (TestParseYAMLPiecesEqualWhole compares the trees).

// fastPiece parses a piece of a cut section by the fast path: nil when a
// line is outside the subset.
func fastPiece(p *piece, src []byte, starts []int, seq bool, indent int) *yaml.Node {
	keyLine := src[starts[p.key]:starts[p.key+1]]
	colon := 0
	for colon < len(keyLine) && keyLine[colon] != ':' {
		colon++
	}
	a := &nodeArena{}
	key := a.node()
	if !plainScalar(key, keyLine[:colon], string(keyLine[:colon]), p.key+1, 1) || key.Tag != "!!str" {
		return nil
	}
	// The piece's lines as one string: every scalar's value is a part of
	// it, not a string of its own.
	base := starts[p.lo]
	text := string(src[base:starts[p.hi]])
	val := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	if seq {
		val.Kind, val.Tag = yaml.SequenceNode, "!!seq"
	}
	for i := p.lo; i < p.hi; i++ {
		l := src[starts[i]:starts[i+1]]
		if blankOrComment(l) {
			continue // comments: Parse reads none
		}
		if !startsEntry(l, indent, seq) {
			return nil // an entry over several lines
		}
		l = trimEOL(l)
		f := &flowReader{line: l, text: text[starts[i]-base:][:len(l)], pos: indent, lineNo: i + 1, a: a}
		if seq {
			if len(val.Content) == 0 {
				val.Line, val.Column = i+1, indent+1
			}
			f.pos += 2 // "- "
			n := f.node()
			if n == nil || !f.end() {
				return nil
			}
			val.Content = append(val.Content, n)
			continue
		}
		k := f.scalar()
		if k == nil || k.Tag != "!!str" || !f.take(": ") {
			return nil
		}
		if len(val.Content) == 0 {
			val.Line, val.Column = k.Line, k.Column
		}
		v := f.node()
		if v == nil || !f.end() {
			return nil
		}
		val.Content = append(val.Content, k, v)
	}
	if len(val.Content) == 0 {
		return nil
	}
	m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map", Line: key.Line, Column: key.Column, Content: []*yaml.Node{key, val}}
	return &yaml.Node{Kind: yaml.DocumentNode, Line: key.Line, Column: key.Column, Content: []*yaml.Node{m}}
}

func trimEOL(l []byte) []byte {
	for len(l) > 0 && (l[len(l)-1] == '\n' || l[len(l)-1] == '\r' || l[len(l)-1] == ' ') {
		l = l[:len(l)-1]
	}
	return l
}

// flowReader reads one line's flow node.
type flowReader struct {
	line   []byte
	text   string // line as a string
	pos    int
	lineNo int
	a      *nodeArena
}

// nodeArena hands out a piece's nodes and their lists of children from
// larger blocks: a model of 100k ops is millions of nodes.
type nodeArena struct {
	nodes []yaml.Node
	ptrs  []*yaml.Node
	stack []*yaml.Node // the children of the collections being read
}

func (a *nodeArena) node() *yaml.Node {
	if len(a.nodes) == 0 {
		a.nodes = make([]yaml.Node, 512)
	}
	n := &a.nodes[0]
	a.nodes = a.nodes[1:]
	return n
}

// content takes the children stacked from base on off the stack, into a
// list of their own (nil when there are none).
func (a *nodeArena) content(base int) []*yaml.Node {
	k := len(a.stack) - base
	if k == 0 {
		return nil
	}
	if len(a.ptrs) < k {
		a.ptrs = make([]*yaml.Node, max(2048, k))
	}
	c := a.ptrs[:k:k]
	a.ptrs = a.ptrs[k:]
	copy(c, a.stack[base:])
	a.stack = a.stack[:base]
	return c
}

func (f *flowReader) spaces() {
	for f.pos < len(f.line) && f.line[f.pos] == ' ' {
		f.pos++
	}
}

func (f *flowReader) take(s string) bool {
	if len(f.line)-f.pos < len(s) || string(f.line[f.pos:f.pos+len(s)]) != s {
		return false
	}
	f.pos += len(s)
	return true
}

func (f *flowReader) end() bool { f.spaces(); return f.pos == len(f.line) }

// node reads a flow mapping, flow sequence or plain scalar; nil outside
// the subset.
func (f *flowReader) node() *yaml.Node {
	f.spaces()
	if f.pos >= len(f.line) {
		return nil
	}
	switch f.line[f.pos] {
	case '{':
		return f.collection(yaml.MappingNode, "!!map", '}')
	case '[':
		return f.collection(yaml.SequenceNode, "!!seq", ']')
	case '"':
		return f.quoted()
	}
	return f.scalar()
}

// quoted reads a double-quoted string without escapes (split writes
// "pserver:0" so).
func (f *flowReader) quoted() *yaml.Node {
	start := f.pos
	for f.pos++; f.pos < len(f.line) && f.line[f.pos] != '"'; f.pos++ {
		if c := f.line[f.pos]; c == '\\' || c < ' ' || c >= 0x7f {
			return nil
		}
	}
	if f.pos == len(f.line) {
		return nil
	}
	f.pos++
	n := f.a.node()
	*n = yaml.Node{Kind: yaml.ScalarNode, Style: yaml.DoubleQuotedStyle, Tag: "!!str", Value: f.text[start+1 : f.pos-1], Line: f.lineNo, Column: start + 1}
	return n
}

func (f *flowReader) collection(kind yaml.Kind, tag string, closer byte) *yaml.Node {
	n := f.a.node()
	*n = yaml.Node{Kind: kind, Tag: tag, Style: yaml.FlowStyle, Line: f.lineNo, Column: f.pos + 1}
	f.pos++
	f.spaces()
	if f.take(string(closer)) {
		return n
	}
	base := len(f.a.stack)
	for {
		if kind == yaml.MappingNode {
			f.spaces()
			k := f.scalar()
			if k == nil || k.Tag != "!!str" || !f.take(": ") {
				return nil
			}
			v := f.node()
			if v == nil {
				return nil
			}
			f.a.stack = append(f.a.stack, k, v)
		} else {
			v := f.node()
			if v == nil {
				return nil
			}
			f.a.stack = append(f.a.stack, v)
		}
		f.spaces()
		switch {
		case f.take(string(closer)):
			n.Content = f.a.content(base)
			return n
		case f.take(", "):
		default:
			return nil
		}
	}
}

// scalar reads a plain scalar of the subset and types it as yaml.v3 does.
func (f *flowReader) scalar() *yaml.Node {
	start := f.pos
	for f.pos < len(f.line) && plainByte(f.line[f.pos]) {
		f.pos++
	}
	n := f.a.node()
	if !plainScalar(n, f.line[start:f.pos], f.text[start:f.pos], f.lineNo, start+1) {
		return nil
	}
	return n
}

func plainByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
		c == '_' || c == '@' || c == '.' || c == '$' || c == '-' || c == '+' || c == '/'
}

// plainScalar types s, whose bytes are all plainByte: a string starting
// with a letter, _, $ or /, other than words yaml.v3 gives another tag;
// a decimal integer; a plain decimal; true or false, into n, whose
// Value becomes str (s as a string). Else false.
func plainScalar(n *yaml.Node, s []byte, str string, line, col int) bool {
	if len(s) == 0 {
		return false
	}
	*n = yaml.Node{Kind: yaml.ScalarNode, Line: line, Column: col}
	for _, c := range s {
		if !plainByte(c) {
			return false
		}
	}
	switch c := s[0]; {
	case c >= '0' && c <= '9' || c == '-':
		switch {
		case isDecimal(s, false):
			n.Tag = "!!int"
		case isDecimal(s, true):
			n.Tag = "!!float"
		default:
			return false
		}
	case c == '.' || c == '+' || c == '@':
		return false // '@' cannot start a plain scalar
	default:
		switch string(s) {
		case "true", "false":
			n.Tag = "!!bool"
		case "True", "TRUE", "False", "FALSE", "null", "Null", "NULL",
			"y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO",
			"on", "On", "ON", "off", "Off", "OFF":
			return false
		default:
			n.Tag = "!!str"
		}
	}
	n.Value = str
	return true
}

// isDecimal matches -?(0|[1-9][0-9]*), and with frac a "." and digits after it.
func isDecimal(s []byte, frac bool) bool {
	if len(s) > 0 && s[0] == '-' {
		s = s[1:]
	}
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 || (s[0] == '0' && i > 1) {
		return false
	}
	if !frac {
		return i == len(s)
	}
	if i == len(s) || s[i] != '.' {
		return false
	}
	j := i + 1
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	return j > i+1 && j == len(s)
}
