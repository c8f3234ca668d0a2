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
// The output is a function of Options only: the same options write the
// same bytes.
package criteo

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
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
}

// Defaults of Options.
const (
	DefaultVocab = 10000
	DefaultZipf  = 1.2
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

func (o Options) withDefaults() Options {
	if o.Vocab == 0 {
		o.Vocab = DefaultVocab
	}
	if o.Zipf == 0 {
		o.Zipf = DefaultZipf
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
	}
	return nil
}

// Write writes opt.Rows lines to w.
func Write(w io.Writer, opt Options) error {
	if err := opt.Check(); err != nil {
		return err
	}
	opt = opt.withDefaults()
	r := rand.New(rand.NewPCG(opt.Seed, 0xc417e0))
	var zipf [CatColumns]*rand.Zipf
	for c := range zipf {
		zipf[c] = rand.NewZipf(r, opt.Zipf, 1, uint64(opt.Vocab-1))
	}
	bw := bufio.NewWriterSize(w, 1<<16)
	line := make([]byte, 0, 512)
	for i := int64(0); i < opt.Rows; i++ {
		line = line[:0]
		line = append(line, '?', '\t') // the label, once z is known
		z := bias
		for j := 0; j < IntColumns; j++ {
			if r.Float64() >= intMissing[j] {
				x := int64(-math.Log(1-r.Float64()) * intMean[j])
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
			if r.Float64() >= catMissing[c] {
				k := zipf[c].Uint64()
				line = appendHex(line, idOf(opt.Seed, c, uint32(k)))
				if c < informative {
					z += weightOf(opt.Seed, c, uint32(k))
				}
			}
			if c < CatColumns-1 {
				line = append(line, '\t')
			}
		}
		line = append(line, '\n')
		if r.Float64() < 1/(1+math.Exp(-z)) {
			line[0] = '1'
		} else {
			line[0] = '0'
		}
		if _, err := bw.Write(line); err != nil {
			return err
		}
	}
	return bw.Flush()
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
