package data

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/psgraph/psgraph/dsl"
)

// Vocabs are the vocabularies of a model's data, by spec (its Key:
// data.ids[1], data.label): each column's words (one list for a spec
// whose columns share one, a file's or a shared_space one's), a word's
// place its id. Those built from the training rows are saved with the
// model (Scaling.Vocabs), so that eval, predict and serve map values to
// the ids training did.
type Vocabs map[string][][]string

// vocabIndex is one vocabulary as the parser looks values up in it.
type vocabIndex struct {
	ids  map[string]int32
	cap  int32 // ids of its words: their number, or a built one's max_size
	oov  int   // buckets of the values it lacks, from cap on
	span int32 // cap + oov: the ids it takes
	// counts, while counting: how often each value was seen.
	counts map[string]*int64
}

// lookup is the id of value f within the vocabulary (false: not in it and
// no OOV bucket to take it).
func (v *vocabIndex) lookup(f []byte) (int32, bool) {
	if id, ok := v.ids[string(f)]; ok {
		return id, true
	}
	if v.oov > 0 {
		return v.cap + bucketOf(hashKey(fnvOffset64, f), v.oov), true
	}
	return 0, false
}

func (v *vocabIndex) count(f []byte) {
	if c := v.counts[string(f)]; c != nil {
		*c++
		return
	}
	n := int64(1)
	v.counts[string(f)] = &n
}

func newVocabIndex(words []string, vs *dsl.Vocab) *vocabIndex {
	v := &vocabIndex{ids: make(map[string]int32, len(words)), cap: int32(len(words)), oov: vs.OOV}
	if vs.File == "" && vs.MaxSize > 0 {
		v.cap = int32(vs.MaxSize)
	}
	for i, w := range words {
		v.ids[w] = int32(i)
	}
	v.span = v.cap + int32(v.oov)
	return v
}

// vocabColumns is how many vocabularies a spec has: one per column for a
// built one that is not shared, else one.
func vocabColumns(c *dsl.Column) int {
	if c.Vocab.File != "" || c.Vocab.Shared || c.MaxLen > 0 {
		return 1
	}
	return len(c.Cols)
}

// setVocabs gives the parser its vocabularies: those of saved (a model's,
// nil: none) first, then each file's; a built one missing from both
// makes the parser count values (counting) until buildVocabs.
func (p *rowParser) setVocabs(saved Vocabs) {
	p.counting = false
	specs := p.vocabSpecs()
	p.vocabsNow = nil
	for _, c := range specs {
		lists, ok := saved[c.Key()]
		if !ok && c.Vocab.File != "" {
			lists, ok = [][]string{c.Vocab.Words}, true
		}
		if ok {
			if p.vocabsNow == nil {
				p.vocabsNow = Vocabs{}
			}
			p.vocabsNow[c.Key()] = lists
		}
		n := vocabColumns(c)
		idx := make([]*vocabIndex, n)
		for k := range idx {
			if ok && k < len(lists) {
				idx[k] = newVocabIndex(lists[k], c.Vocab)
			} else {
				idx[k] = &vocabIndex{counts: map[string]*int64{}}
				p.counting = true
			}
		}
		p.placeVocabs(c, idx)
	}
}

// vocabSpecs are the specs with a vocabulary: the label's, then the ids'.
func (p *rowParser) vocabSpecs() []*dsl.Column {
	var out []*dsl.Column
	if c := p.spec.Label; c != nil && c.Vocab != nil {
		out = append(out, c)
	}
	for _, s := range p.ids {
		if s.kind == idsVocab {
			out = append(out, s.c)
		}
	}
	return out
}

// placeVocabs gives spec c its vocabularies, one per column or one for
// all, each column's ids starting after the previous vocabulary's.
func (p *rowParser) placeVocabs(c *dsl.Column, idx []*vocabIndex) {
	if c == p.spec.Label {
		p.labelVocab = idx[0]
		return
	}
	for j := range p.ids {
		s := &p.ids[j]
		if s.c != c {
			continue
		}
		s.vocabs, s.base = s.vocabs[:0], s.base[:0]
		var base int32
		for k := range max(len(c.Cols), 1) {
			v := idx[min(k, len(idx)-1)]
			s.vocabs, s.base = append(s.vocabs, v), append(s.base, base)
			if len(idx) > 1 {
				base += v.span
			}
		}
	}
}

// vocabID is the id of field f of column col, the k-th of ids spec s.
func (p *rowParser) vocabID(s *idSpec, k int, f []byte, col, lineNo int) (int32, error) {
	v := s.vocabs[k]
	if v.counts != nil {
		v.count(f)
		return 0, nil
	}
	if id, ok := v.lookup(f); ok {
		return s.base[k] + id, nil
	}
	return 0, p.errAt(lineNo, "%s: %q is not in the vocabulary of %s %q (%s), and it has no oov_buckets to hold other values; add oov_buckets: N to its vocab, or the value to the vocabulary", p.colName(col), f, s.c.Key(), s.c.Name, s.c.Vocab.Pos)
}

// labelClass is the class id of label field f by the label's vocabulary.
func (p *rowParser) labelClass(c *dsl.Column, f []byte, col, lineNo int) (int32, error) {
	v := p.labelVocab
	if v.counts != nil {
		v.count(f)
		return 0, nil
	}
	if id, ok := v.lookup(f); ok {
		return id, nil
	}
	return 0, p.errAt(lineNo, "%s: %q is not a class of the label %q's vocabulary (%s); its classes are the values of the vocabulary, numbered from 0: add it, or drop the row", p.colName(col), f, c.Name, c.Vocab.Pos)
}

// buildVocabs ends counting: each built vocabulary is the values seen at
// least min_count times, at most max_size of them, the most frequent
// first (ties in byte order); a label's classes are in byte order.
// The parser then maps values by them; they are returned to be saved.
func (p *rowParser) buildVocabs(saved Vocabs) Vocabs {
	out := Vocabs{}
	for k, v := range saved {
		out[k] = v
	}
	for _, c := range p.vocabSpecs() {
		if _, ok := out[c.Key()]; ok || c.Vocab.File != "" {
			continue
		}
		var idx []*vocabIndex
		if c == p.spec.Label {
			idx = []*vocabIndex{p.labelVocab}
		} else {
			for _, s := range p.ids {
				if s.c == c {
					idx = s.vocabs[:vocabColumns(c)]
				}
			}
		}
		lists := make([][]string, len(idx))
		for k, v := range idx {
			lists[k] = built(v.counts, c.Vocab, c == p.spec.Label)
		}
		out[c.Key()] = lists
	}
	p.setVocabs(out)
	return p.vocabsNow
}

// built is the vocabulary of counted values.
func built(counts map[string]*int64, vs *dsl.Vocab, byValue bool) []string {
	words := make([]string, 0, len(counts))
	for w, n := range counts {
		if *n >= int64(vs.MinCount) {
			words = append(words, w)
		}
	}
	slices.SortFunc(words, func(a, b string) int {
		if !byValue {
			if c := cmp.Compare(*counts[b], *counts[a]); c != 0 {
				return c
			}
		}
		return cmp.Compare(a, b)
	})
	if vs.MaxSize > 0 && len(words) > vs.MaxSize {
		words = words[:vs.MaxSize]
	}
	return words
}

// fitsVocabs checks saved vocabularies against the specs that have one.
func (p *rowParser) fitsVocabs(saved Vocabs) error {
	for _, c := range p.vocabSpecs() {
		lists, ok := saved[c.Key()]
		if !ok {
			continue
		}
		if len(lists) != vocabColumns(c) {
			return fmt.Errorf("the saved vocabularies of %s are %d, but the model's spec (%s) has %d; the model file and the parameter file do not belong together", c.Key(), len(lists), c.Pos, vocabColumns(c))
		}
	}
	return nil
}
