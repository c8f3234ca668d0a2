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
	key, ok := plainScalar(keyLine[:colon], p.key+1, 1)
	if !ok || key.Tag != "!!str" {
		return nil
	}
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
		f := &flowReader{line: l, pos: indent, lineNo: i + 1}
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
	pos    int
	lineNo int
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
	return &yaml.Node{Kind: yaml.ScalarNode, Style: yaml.DoubleQuotedStyle, Tag: "!!str", Value: string(f.line[start+1 : f.pos-1]), Line: f.lineNo, Column: start + 1}
}

func (f *flowReader) collection(kind yaml.Kind, tag string, closer byte) *yaml.Node {
	n := &yaml.Node{Kind: kind, Tag: tag, Style: yaml.FlowStyle, Line: f.lineNo, Column: f.pos + 1}
	f.pos++
	f.spaces()
	if f.take(string(closer)) {
		return n
	}
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
			n.Content = append(n.Content, k, v)
		} else {
			v := f.node()
			if v == nil {
				return nil
			}
			n.Content = append(n.Content, v)
		}
		f.spaces()
		switch {
		case f.take(string(closer)):
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
	n, ok := plainScalar(f.line[start:f.pos], f.lineNo, start+1)
	if !ok {
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
// a decimal integer; a plain decimal; true or false. Else not ok.
func plainScalar(s []byte, line, col int) (*yaml.Node, bool) {
	if len(s) == 0 {
		return nil, false
	}
	n := &yaml.Node{Kind: yaml.ScalarNode, Line: line, Column: col}
	for _, c := range s {
		if !plainByte(c) {
			return nil, false
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
			return nil, false
		}
	case c == '.' || c == '+' || c == '@':
		return nil, false // '@' cannot start a plain scalar
	default:
		switch string(s) {
		case "true", "false":
			n.Tag = "!!bool"
		case "True", "TRUE", "False", "FALSE", "null", "Null", "NULL",
			"y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO",
			"on", "On", "ON", "off", "Off", "OFF":
			return nil, false
		default:
			n.Tag = "!!str"
		}
	}
	n.Value = string(s)
	return n, true
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
