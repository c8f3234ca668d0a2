package dsl

import (
	"bytes"
	"runtime"
	"sync"
	"sync/atomic"

	"gopkg.in/yaml.v3"
)

// parallelParseMin is the model size from which parseYAML parses pieces of
// the document on several cores: yaml.v3 is most of Parse's time on a large
// model (docs/split.md, Cost), and a model's big sections (params, ops) are
// long lists of independent entries.
const parallelParseMin = 1 << 20

// parseYAML parses src into its document node. A large document is cut at
// the lines that start a top-level key or an entry of a top-level block
// list or mapping, the pieces are parsed concurrently, and their entries
// joined again into the tree that one parse gives (TestParseYAMLPiecesEqualWhole).
// A piece is padded with blank lines so its nodes carry the lines they have
// in src. A cut in the wrong place (inside a multi-line quoted string or
// flow collection, or between an anchor and its alias) leaves a piece that
// does not parse; then, and whenever any piece fails, src is parsed whole,
// so errors are exactly those of one parse.
func parseYAML(src []byte) (*yaml.Node, error) {
	if n := runtime.GOMAXPROCS(0); n > 1 && len(src) >= parallelParseMin {
		if doc := parsePieces(src, 4*n, n, true); doc != nil {
			return doc, nil
		}
	}
	return parseWhole(src)
}

func parseWhole(src []byte) (*yaml.Node, error) {
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(src)).Decode(&doc); err != nil {
		return nil, err
	}
	return &doc, nil
}

// piece is a run of src's lines [lo, hi) parsed alone. With key >= 0 the
// lines are entries of the block collection under the top-level key on
// line key, which heads the piece; cont marks every piece of such a
// section after its first.
type piece struct {
	key    int
	lo, hi int
	cont   bool
	indent int  // of the section's entries
	seq    bool // the entries are list items
	doc    *yaml.Node
}

// parsePieces is parseYAML's concurrent path: nil when src does not cut
// cleanly into about want pieces or a piece fails to parse.
func parsePieces(src []byte, want, workers int, fast bool) *yaml.Node {
	if bytes.HasPrefix(src, []byte("\xef\xbb\xbf")) {
		return nil // a byte order mark: leave encodings to yaml.v3
	}
	starts := lineStarts(src)
	nl := len(starts) - 1 // lines; starts[nl] == len(src)
	line := func(i int) []byte { return src[starts[i]:starts[i+1]] }
	var keys []int // top-level key lines
	for i := range nl {
		l := line(i)
		if len(l) == 0 || blankOrComment(l) {
			continue
		}
		if bytes.HasPrefix(l, []byte("---")) {
			return nil // document markers: Parse reads the first document only
		}
		switch l[0] {
		case ' ', '-', '}', ']', '\t':
			if len(keys) == 0 {
				return nil // not a block mapping at the top
			}
			continue
		case '%', '.':
			return nil // directives, document markers

		}
		keys = append(keys, i)
	}
	if len(keys) == 0 {
		return nil
	}
	target := len(src)/want + 1
	var pieces []piece
	lo := keys[0] // whole sections gathered into one piece from here
	flush := func(hi int) {
		if hi > lo {
			pieces = append(pieces, piece{key: -1, lo: lo, hi: hi})
		}
		lo = hi
	}
	for s, k := range keys {
		end := nl
		if s+1 < len(keys) {
			end = keys[s+1]
		}
		if starts[end]-starts[k] <= target || !opensBlock(line(k)) {
			if starts[end]-starts[lo] > target {
				flush(k)
			}
			continue
		}
		flush(k)
		// Cut the section's entries: lines at the entries' indentation.
		first, indent, seq := entryIndent(src, starts, k+1, end)
		if first < 0 {
			continue
		}
		from := first
		for i := first + 1; i < end; i++ {
			if starts[i]-starts[from] < target {
				continue
			}
			if l := line(i); startsEntry(l, indent, seq) {
				pieces = append(pieces, piece{key: k, lo: from, hi: i, cont: from != first, indent: indent, seq: seq})
				from = i
			}
		}
		pieces = append(pieces, piece{key: k, lo: from, hi: end, cont: from != first, indent: indent, seq: seq})
		lo = end
	}
	flush(nl)
	if len(pieces) < 2 {
		return nil
	}
	var wg sync.WaitGroup
	var failed atomic.Bool
	next := make(chan *piece)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var buf []byte
			for p := range next {
				if p.key >= 0 && fast {
					if p.doc = fastPiece(p, src, starts, p.seq, p.indent); p.doc != nil {
						continue
					}
				}
				buf = p.text(buf[:0], src, starts)
				doc, err := parseWhole(buf)
				if err != nil || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
					failed.Store(true)
					continue
				}
				p.doc = doc
			}
		}()
	}
	for i := range pieces {
		next <- &pieces[i]
	}
	close(next)
	wg.Wait()
	if failed.Load() {
		return nil
	}
	return joinPieces(pieces)
}

// text is the piece as a document of its own: blank lines up to its first
// line (so line numbers match src), then, for entries of a section, the
// section's key line, blank lines to the entries, and the entries.
func (p *piece) text(buf, src []byte, starts []int) []byte {
	if p.key >= 0 {
		buf = append(buf, bytes.Repeat([]byte{'\n'}, p.key)...)
		buf = append(buf, src[starts[p.key]:starts[p.key+1]]...)
		if len(buf) > 0 && buf[len(buf)-1] != '\n' {
			buf = append(buf, '\n')
		}
		buf = append(buf, bytes.Repeat([]byte{'\n'}, p.lo-p.key-1)...)
	} else {
		buf = append(buf, bytes.Repeat([]byte{'\n'}, p.lo)...)
	}
	return append(buf, src[starts[p.lo]:starts[p.hi]]...)
}

// joinPieces puts the pieces' entries back into one document; nil when a
// piece does not hold what its cut promised.
func joinPieces(pieces []piece) *yaml.Node {
	doc := pieces[0].doc
	root := doc.Content[0]
	var section *yaml.Node // value of the section being continued
	for i := range pieces {
		p := &pieces[i]
		m := p.doc.Content[0]
		if p.key >= 0 && len(m.Content) != 2 {
			return nil
		}
		if p.cont {
			v := m.Content[1]
			if section == nil || v.Kind != section.Kind || v.Style != section.Style || v.Tag != section.Tag {
				return nil
			}
			section.Content = append(section.Content, v.Content...)
			continue
		}
		if i > 0 {
			root.Content = append(root.Content, m.Content...)
		}
		section = nil
		if p.key >= 0 {
			section = m.Content[1]
			if section.Style&yaml.FlowStyle != 0 || (section.Kind != yaml.SequenceNode && section.Kind != yaml.MappingNode) {
				return nil
			}
		}
	}
	return doc
}

// lineStarts returns the offset of each line and, last, len(src).
func lineStarts(src []byte) []int {
	starts := make([]int, 0, bytes.Count(src, []byte{'\n'})+2)
	for off := 0; off < len(src); {
		starts = append(starts, off)
		i := bytes.IndexByte(src[off:], '\n')
		if i < 0 {
			off = len(src)
		} else {
			off += i + 1
		}
	}
	return append(starts, len(src))
}

func blankOrComment(l []byte) bool {
	t := bytes.TrimLeft(l, " \t\r\n")
	return len(t) == 0 || t[0] == '#'
}

// opensBlock reports whether a top-level key line ends at its colon (its
// value is a block collection on the lines below), a trailing comment
// aside. A key line holding its value, or anything unusual, is not cut.
func opensBlock(l []byte) bool {
	if i := bytes.Index(l, []byte(" #")); i >= 0 {
		l = l[:i]
	}
	l = bytes.TrimRight(l, " \t\r\n")
	return len(l) > 1 && l[len(l)-1] == ':' && bytes.IndexAny(l, "\"'{}[]&*!|>") < 0
}

// entryIndent finds the first entry line of a section's block value in
// lines [from, to): its index, indentation, and whether the entries are
// list items ("- "); first is -1 when there is none.
func entryIndent(src []byte, starts []int, from, to int) (first, indent int, seq bool) {
	for i := from; i < to; i++ {
		l := src[starts[i]:starts[i+1]]
		if blankOrComment(l) {
			continue
		}
		n := 0
		for n < len(l) && l[n] == ' ' {
			n++
		}
		return i, n, isItem(l[n:])
	}
	return -1, 0, false
}

func isItem(t []byte) bool {
	return len(t) > 0 && t[0] == '-' && (len(t) == 1 || t[1] == ' ' || t[1] == '\n' || t[1] == '\r')
}

// startsEntry reports whether l begins an entry of a block collection at
// indent: exactly indent spaces, then a list item or (for a mapping) a key.
func startsEntry(l []byte, indent int, seq bool) bool {
	if len(l) <= indent {
		return false
	}
	for _, c := range l[:indent] {
		if c != ' ' {
			return false
		}
	}
	t := l[indent:]
	if seq {
		return isItem(t)
	}
	switch t[0] {
	case ' ', '\t', '#', '\r', '\n', '-', '?', ':', '}', ']', ',':
		return false
	}
	return true
}
