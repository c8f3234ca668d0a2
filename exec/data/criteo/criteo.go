// Package criteo writes synthetic click logs in the format of the Criteo
// display-advertising (Kaggle) data set: one example per line, 40
// tab-separated fields: the label (0 or 1), 13 integer features (I1..I13)
// and 26 categorical features (C1..C26) of 8 lower-case hex digits. Any
// feature may be empty (missing), at about the rates of the Kaggle set.
//
// The ids of each categorical column are drawn Zipf(s) over a vocabulary
// of its own: rank k (from 0) with probability proportional to 1/(k+1)^s,
// the way a few ads and sites take most impressions. The label is a
// Bernoulli draw of sigmoid(z), z the sum of a hidden weight per id of the
// first eight categorical columns, of log(1+x) of three integer features
// with fixed weights, and a bias: a model that learns per-id weights (an
// embedding of the hashed ids) and the integer features predicts it.
//
// With Truth "fm" the label's logit also holds a factorization machine's
// interactions: each id of the first eight categorical columns has a
// hidden latent vector of FactorDim entries, and z gains the sum of
// <v_i, v_j> over every pair of those columns the row has, times
// Interaction (1 unless set: the strength of the interactions). A linear
// model of the ids cannot learn it; an interaction model (FM, DeepFM, DCN,
// DLRM) can. With History L > 0 each line gains a 41st field: a user's history
// of 0 to L ids of C1's vocabulary (drawn Zipf as C1's), separated by '|',
// and z gains its interaction with the row's C1 id (below). Neither option
// changes the first 40 fields of a line; Truth "linear" without History
// (the default) writes the files it always wrote.
//
// Generate also reports the Bayes-optimal AUC of the file: the AUC the
// true click probabilities themselves score against the labels drawn from
// them, which no model of the file can beat on average.
//
// The output is a function of Options only: the same options write the
// same bytes.
package criteo

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"math/bits"
	"math/rand/v2"
	"slices"
	"strconv"
)

// Columns of a line.
const (
	IntColumns = 13
	CatColumns = 26
	Fields     = 1 + IntColumns + CatColumns
)

// Options configure a generated file.
type Options struct {
	Rows  int64
	Seed  uint64
	Vocab int     // ids per categorical column; 0: DefaultVocab
	Zipf  float64 // exponent s of the id distribution, > 1; 0: DefaultZipf
	// Truth is the label's model: "linear" (or "", the default) or "fm"
	// (linear plus pairwise interactions of latent vectors).
	Truth string
	// Interaction multiplies Truth fm's pairwise term in z: the strength
	// of the interactions against the first-order part (as if each latent
	// vector were scaled by its square root). 0: DefaultInteraction.
	Interaction float64
	// History > 0 appends a multi-valued history column of 0 to History
	// ids (uniform) of C1's vocabulary, which interacts with C1 in the
	// label's logit.
	History int
	// Drift > 0 slides each categorical column's vocabulary over the
	// file by Drift x Vocab ids: new ids appear at the head of the
	// distribution, old ones fall to its tail and out (see window).
	Drift float64
	// Probs, when set, receives each row's true click probability, one
	// per line, as the AUC computation uses it (float32, shortest form).
	Probs io.Writer
}

// window is the first index of row i's window: d - floor(d i / rows),
// exact for any d < 2^64 and i < rows. The window is the vocabulary of
// every categorical column at row i of a file of rows rows: the id
// indices [first, first+Vocab), index first+k being the id of Zipf rank k
// (rank 0 the most frequent), d = floor(Drift x Vocab) (driftIDs). It
// starts at [d, d+Vocab) and slides down to [0, Vocab) by the file's end,
// so ids below the first row's window are new, and the ids above the
// last row's window have faded out. Without drift it is [0, Vocab)
// throughout. An id's hidden weight and latent vector belong to its
// index, so they move with it.
func window(d uint64, i, rows int64) uint64 {
	hi, lo := bits.Mul64(d, uint64(i))
	off, _ := bits.Div64(hi, lo, uint64(rows))
	return d - off
}

// driftIDs is D = floor(Drift x Vocab), the ids a window slides by.
func (o Options) driftIDs() uint64 { return uint64(o.Drift * float64(o.Vocab)) }

// Defaults of Options.
const (
	DefaultVocab       = 10000
	DefaultZipf        = 1.2
	DefaultInteraction = 1.0
)

// Missing rates per column, rounded from the Kaggle training set.
var (
	intMissing = [IntColumns]float64{0.45, 0, 0.21, 0.22, 0.03, 0.22, 0.04, 0, 0.04, 0.45, 0.04, 0.77, 0.22}
	catMissing = [CatColumns]float64{0, 0.03, 0.03, 0, 0, 0.12, 0, 0, 0, 0.03, 0, 0.03, 0, 0, 0, 0.03, 0, 0, 0.44, 0.44, 0.03, 0.76, 0, 0.03, 0.44, 0.44}
	// intMean is the mean of an integer feature's exponential draw.
	intMean = [IntColumns]float64{3, 100, 20, 7, 18000, 110, 16, 12, 100, 0.6, 2.7, 1, 8}
	// intWeight is the weight of log(1+x) in z; zero for most columns.
	intWeight = [IntColumns]float64{0.4, 0, 0, -0.3, 0, 0, 0.25}
)

const (
	informative = 8    // categorical columns whose ids move the label
	idWeight    = 1.0  // hidden id weights are uniform in [-idWeight, idWeight]
	bias        = -1.6 // about a quarter of the labels are 1
)

// The interactions of Truth "fm" and of the history.
const (
	// FactorDim is the length of the latent vectors.
	FactorDim = 4
	// factorStd is the standard deviation of a latent vector's entries
	// (uniform in ±factorStd·√3): the 28 pairs of the informative columns
	// then add more to z's variance than its first-order part (4.3
	// against 2.5 over Zipf(1.2) draws of 1,000 ids; gen reports both).
	factorStd = 0.45
	// fmBias replaces bias with Truth "fm", keeping about a quarter of
	// the labels 1.
	fmBias = -1.9
	// historyWeight scales the history's interaction with C1, and
	// historyBias offsets its mean (a history often holds the row's own
	// item: Zipf ids repeat), keeping about a quarter of the labels 1.
	historyWeight = 2.0
	historyBias   = -0.45
	// HistorySeparator separates the ids of the history column.
	HistorySeparator = '|'
)

func (o Options) withDefaults() Options {
	if o.Vocab == 0 {
		o.Vocab = DefaultVocab
	}
	if o.Zipf == 0 {
		o.Zipf = DefaultZipf
	}
	if o.Interaction == 0 {
		o.Interaction = DefaultInteraction
	}
	return o
}

// Check reports options that cannot generate a file.
func (o Options) Check() error {
	o = o.withDefaults()
	switch {
	case o.Rows <= 0:
		return fmt.Errorf("rows must be positive, got %d", o.Rows)
	case o.Vocab <= 0 || o.Vocab > math.MaxUint32:
		return fmt.Errorf("vocab must be in [1, %d], got %d", uint32(math.MaxUint32), o.Vocab)
	case !(o.Zipf > 1) || math.IsInf(o.Zipf, 0):
		return fmt.Errorf("zipf (the exponent of the ids' distribution) must be a number > 1, got %g", o.Zipf)
	case o.Truth != "" && o.Truth != "linear" && o.Truth != "fm":
		return fmt.Errorf("truth must be linear or fm, got %q", o.Truth)
	case !(o.Interaction > 0) || math.IsInf(o.Interaction, 0):
		return fmt.Errorf("interaction (the factor of the fm truth's pairwise term) must be a number > 0, got %g", o.Interaction)
	case o.Interaction != DefaultInteraction && o.Truth != "fm":
		return fmt.Errorf("interaction scales the pairwise term of truth fm; truth is %s: set truth fm too", o.truthName())
	case o.History < 0 || o.History > 1000:
		return fmt.Errorf("history (the most ids of the history column) must be in [0, 1000], got %d", o.History)
	case !(o.Drift >= 0) || float64(o.Vocab)*(1+o.Drift) > math.MaxUint32:
		return fmt.Errorf("drift (the share of the vocabulary its window slides by over the file) must be >= 0 with vocab x (1 + drift) at most %d ids, got %g", uint32(math.MaxUint32), o.Drift)
	}
	return nil
}

func (o Options) truthName() string {
	if o.Truth == "" {
		return "linear"
	}
	return o.Truth
}

// Stats describes a generated file through its true click probabilities
// p (rounded to float32): what no model of the file can beat.
type Stats struct {
	Rows, Clicks int64
	// AUC is the AUC of p against the labels drawn from it: the
	// fraction of (click, non-click) row pairs in which the click has the
	// larger p, a tie counting 1/2.
	AUC float64
	// ExpectedAUC is the AUC's expectation over the label draws, as a
	// ratio of expectations: the sum over ordered row pairs i != j of
	// p_i (1 - p_j) [p_i > p_j] (1/2 on a tie), over the sum of
	// p_i (1 - p_j).
	ExpectedAUC float64
	// LogLoss is the mean log loss of p against the labels.
	LogLoss float64
	// FirstOrderVar and InteractionVar are the variances over the rows
	// of z's two parts: the first-order one (the bias, the ids' weights
	// and the integer features) and the interactions (Truth fm's pairwise
	// term times Interaction, and the history's term), z their sum.
	FirstOrderVar, InteractionVar float64
}

// Generate writes opt.Rows lines to w and returns the statistics of their
// true click probabilities. It holds 8 bytes per row to rank them.
func Generate(w io.Writer, opt Options) (*Stats, error) {
	if err := opt.Check(); err != nil {
		return nil, err
	}
	g := newGenerator(opt.withDefaults())
	bw := bufio.NewWriterSize(w, 1<<16)
	var pw *bufio.Writer
	if opt.Probs != nil {
		pw = bufio.NewWriterSize(opt.Probs, 1<<16)
	}
	var pline []byte
	for i := int64(0); i < g.opt.Rows; i++ {
		p, click := g.row(i)
		if _, err := bw.Write(g.line); err != nil {
			return nil, err
		}
		g.record(p, click)
		if pw != nil {
			pline = strconv.AppendFloat(pline[:0], float64(p), 'g', -1, 32)
			pline = append(pline, '\n')
			if _, err := pw.Write(pline); err != nil {
				return nil, err
			}
		}
	}
	if pw != nil {
		if err := pw.Flush(); err != nil {
			return nil, err
		}
	}
	if err := bw.Flush(); err != nil {
		return nil, err
	}
	st := g.st
	n := float64(st.Rows)
	st.LogLoss /= n
	st.AUC, st.ExpectedAUC = aucOf(g.ranked)
	st.FirstOrderVar = g.first.variance(n)
	st.InteractionVar = g.inter.variance(n)
	return st, nil
}

// generator draws a file's rows one after another.
type generator struct {
	opt   Options
	r     *rand.Rand
	zipf  [CatColumns]*rand.Zipf
	hr    *rand.Rand // the history's own stream, so the other fields are those of a file without it
	hzipf *rand.Zipf
	fm    bool
	drift uint64
	ranks [informative]int64 // the row's rank of each informative column; -1: missing
	line  []byte
	// statistics: the float32 bits of p << 1 | label, per
	// row, and the moments of z's parts
	st           *Stats
	ranked       []uint64
	first, inter moments
}

// moments accumulates a sum and a sum of squares about a shift (the first
// value), which keeps the variance accurate when the mean is large.
type moments struct {
	shift, sum, sq float64
	started        bool
}

func (m *moments) add(x float64) {
	if !m.started {
		m.shift, m.started = x, true
	}
	d := x - m.shift
	m.sum += d
	m.sq += d * d
}

func (m *moments) variance(n float64) float64 {
	if n == 0 {
		return 0
	}
	mean := m.sum / n
	return math.Max(m.sq/n-mean*mean, 0)
}

func newGenerator(opt Options) *generator {
	g := &generator{opt: opt, fm: opt.Truth == "fm", drift: opt.driftIDs(), line: make([]byte, 0, 512)}
	g.r = rand.New(rand.NewPCG(opt.Seed, 0xc417e0))
	for c := range g.zipf {
		g.zipf[c] = rand.NewZipf(g.r, opt.Zipf, 1, uint64(opt.Vocab-1))
	}
	if opt.History > 0 {
		g.hr = rand.New(rand.NewPCG(opt.Seed, 0x415707))
		g.hzipf = rand.NewZipf(g.hr, opt.Zipf, 1, uint64(opt.Vocab-1))
	}
	g.st = &Stats{Rows: opt.Rows}
	g.ranked = make([]uint64, 0, opt.Rows)
	return g
}

// row draws row i into g.line and returns its true click probability and
// its drawn label.
func (g *generator) row(i int64) (float32, bool) {
	var first uint64 // the index of rank 0 (window)
	if g.drift > 0 {
		first = window(g.drift, i, g.opt.Rows)
	}
	line := append(g.line[:0], '?', '\t') // the label, once z is known
	z := bias
	if g.fm {
		z = fmBias
	}
	for j := 0; j < IntColumns; j++ {
		if g.r.Float64() >= intMissing[j] {
			x := int64(-math.Log(1-g.r.Float64()) * intMean[j])
			if j == 1 {
				x -= 3 // I2 of the Kaggle set starts at -3
			}
			line = appendInt(line, x)
			if x > 0 {
				z += intWeight[j] * math.Log1p(float64(x))
			}
		}
		line = append(line, '\t')
	}
	for c := 0; c < CatColumns; c++ {
		if c < informative {
			g.ranks[c] = -1
		}
		if g.r.Float64() >= catMissing[c] {
			k := g.zipf[c].Uint64() + first
			line = appendHex(line, idOf(g.opt.Seed, c, uint32(k)))
			if c < informative {
				z += weightOf(g.opt.Seed, c, uint32(k))
				g.ranks[c] = int64(k)
			}
		}
		if c < CatColumns-1 {
			line = append(line, '\t')
		}
	}
	zFirst, zInter := z, 0.0
	if g.fm {
		// Interaction is 1 unless set, and z + 1·x is z + x to the bit.
		dz := g.opt.Interaction * pairwise(g.opt.Seed, &g.ranks)
		z += dz
		zInter += dz
	}
	if g.hr != nil {
		var dz float64
		line, dz = g.history(line, first)
		z += dz
		zInter += dz
	}
	g.first.add(zFirst)
	g.inter.add(zInter)
	line = append(line, '\n')
	p := 1 / (1 + math.Exp(-z))
	click := g.r.Float64() < p
	if click {
		line[0] = '1'
	} else {
		line[0] = '0'
	}
	g.line = line
	return float32(p), click
}

// history appends the row's history column and returns its term of z.
func (g *generator) history(line []byte, first uint64) ([]byte, float64) {
	line = append(line, '\t')
	n := g.hr.IntN(g.opt.History + 1)
	var sum [FactorDim]float64
	for h := 0; h < n; h++ {
		k := uint32(g.hzipf.Uint64() + first)
		if h > 0 {
			line = append(line, HistorySeparator)
		}
		line = appendHex(line, idOf(g.opt.Seed, 0, k))
		for d := range sum {
			sum[d] += factorOf(g.opt.Seed, 0, k, d)
		}
	}
	return line, historyTerm(g.opt.Seed, g.ranks[0], n, &sum)
}

// record adds a row's probability and label to the statistics.
func (g *generator) record(p32 float32, click bool) {
	st := g.st
	b := uint64(math.Float32bits(p32)) << 1
	if click {
		b |= 1
		st.Clicks++
		st.LogLoss -= math.Log(float64(p32))
	} else {
		st.LogLoss -= math.Log1p(-float64(p32))
	}
	g.ranked = append(g.ranked, b)
}

// pairwise is the factorization machine's term of Truth "fm": the sum of
// <v_i, v_j> over the pairs i < j of informative columns the row has (rank
// >= 0), computed as sum_d ((sum_i v_id)^2 - sum_i v_id^2) / 2.
func pairwise(seed uint64, ranks *[informative]int64) float64 {
	var z float64
	for d := 0; d < FactorDim; d++ {
		var s, sq float64
		for c, k := range ranks {
			if k >= 0 {
				v := factorOf(seed, c, uint32(k), d)
				s += v
				sq += v * v
			}
		}
		z += (s*s - sq) / 2
	}
	return z
}

// historyTerm is the history's part of z: historyBias + historyWeight
// <v_item, sum of the history's v> / sqrt(n), v the latent vectors of
// C1's vocabulary, item the row's C1 rank (no interaction when C1 is
// missing or the history empty): a history of items like the row's
// raises its click.
func historyTerm(seed uint64, item int64, n int, sum *[FactorDim]float64) float64 {
	if item < 0 || n == 0 {
		return historyBias
	}
	var dot float64
	for d := range sum {
		dot += factorOf(seed, 0, uint32(item), d) * sum[d]
	}
	return historyBias + historyWeight*dot/math.Sqrt(float64(n))
}

// aucOf computes the AUC of the rows' p against their labels, and its
// expectation over label draws (Stats), from (float32 bits of p) << 1 |
// label per row, which it sorts.
func aucOf(ranked []uint64) (auc, expected float64) {
	slices.Sort(ranked)           // by p, a label 0 before a 1 of the same p
	var pos, neg float64          // labels seen, of the rows below the current tie group
	var wins float64              // sum over clicks of the non-clicks below them (ties 1/2)
	var sumP, sumQ, sumPQ float64 // for the expectation: sum p, sum (1-p), sum p(1-p)
	var ewin float64              // sum over i of p_i * (sum of 1-p_j over p_j < p_i, ties 1/2)
	var qBelow float64            // sum of 1-p of the rows below the tie group
	for i := 0; i < len(ranked); {
		bits := ranked[i] >> 1
		j := i
		var gpos, gneg, gq float64
		for ; j < len(ranked) && ranked[j]>>1 == bits; j++ {
			if ranked[j]&1 == 1 {
				gpos++
			} else {
				gneg++
			}
		}
		p := float64(math.Float32frombits(uint32(bits)))
		n := float64(j - i)
		gq = n * (1 - p)
		wins += gpos * (neg + gneg/2)
		// pairs within the group: i != j, each p (1-p), half a win
		ewin += n*p*qBelow + p*(1-p)*n*(n-1)/2
		qBelow += gq
		sumP += n * p
		sumQ += gq
		sumPQ += n * p * (1 - p)
		pos += gpos
		neg += gneg
		i = j
	}
	auc = math.NaN()
	if pos > 0 && neg > 0 {
		auc = wins / (pos * neg)
	}
	expected = ewin / (sumP*sumQ - sumPQ)
	return auc, expected
}

// factorOf is entry d of the latent vector of rank k of column c, uniform
// in [-factorStd·√3, factorStd·√3].
func factorOf(seed uint64, c int, k uint32, d int) float64 {
	h := mix64(seed*0x94d049bb133111eb ^ uint64(c)<<40 ^ uint64(d)<<32 ^ uint64(k) ^ 0xfac70125)
	return factorStd * math.Sqrt(3) * (2*float64(h>>11)/(1<<53) - 1)
}

// idOf is the 32-bit id of rank k of categorical column c: a bijection of
// k for each (seed, column), so distinct ranks have distinct ids.
func idOf(seed uint64, c int, k uint32) uint32 {
	key := mix64(seed ^ uint64(c+1)*0x9e3779b97f4a7c15)
	x := k ^ uint32(key)
	x *= 0x9e3779b1 // odd: invertible mod 2^32
	x ^= x >> 16
	x *= 0x85ebca6b
	x ^= x >> 13
	return x + uint32(key>>32)
}

// weightOf is the hidden weight of rank k of column c, uniform in
// [-idWeight, idWeight].
func weightOf(seed uint64, c int, k uint32) float64 {
	h := mix64(seed*0xbf58476d1ce4e5b9 ^ uint64(c)<<32 ^ uint64(k) ^ 0x5ca1ab1e)
	return idWeight * (2*float64(h>>11)/(1<<53) - 1)
}

// mix64 is splitmix64's finalizer.
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

func appendInt(b []byte, x int64) []byte {
	if x < 0 {
		b = append(b, '-')
		x = -x
	}
	var d [20]byte
	i := len(d)
	for {
		i--
		d[i] = byte('0' + x%10)
		x /= 10
		if x == 0 {
			break
		}
	}
	return append(b, d[i:]...)
}

func appendHex(b []byte, x uint32) []byte {
	const digits = "0123456789abcdef"
	for s := 28; s >= 0; s -= 4 {
		b = append(b, digits[(x>>s)&0xf])
	}
	return b
}
