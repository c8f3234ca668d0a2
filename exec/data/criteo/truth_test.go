package criteo

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The default options (Truth linear, no history) write the bytes they
// wrote before the fm truth and the history existed: the digests were
// taken from files of that version.
func TestDefaultOutputIsUnchanged(t *testing.T) {
	for _, c := range []struct {
		opt  Options
		want string
	}{
		{Options{Rows: 5000, Seed: 1, Vocab: 100}, "b1170fb0b15460a8860b9e33f86978f5e37fecf2c46f2505640c8e022d24f076"},
		{Options{Rows: 3000, Seed: 4}, "29a590dcefc8161f53c98a19122ec351e4ca8d44276ab9c3c543d2574de7268a"},
		{Options{Rows: 3000, Seed: 4, Truth: "linear"}, "29a590dcefc8161f53c98a19122ec351e4ca8d44276ab9c3c543d2574de7268a"},
		// --truth fm as it was written before --interaction existed, and
		// with the default interaction strength spelled out
		{Options{Rows: 3000, Seed: 4, Vocab: 200, Truth: "fm"}, "527c78431baec1c2d21698539cb0536dbfc0fe69ea8c5c79a10d4d13396dcebe"},
		{Options{Rows: 3000, Seed: 4, Vocab: 200, Truth: "fm", Interaction: 1}, "527c78431baec1c2d21698539cb0536dbfc0fe69ea8c5c79a10d4d13396dcebe"},
		{Options{Rows: 3000, Seed: 4, Vocab: 200, Truth: "fm", History: 5}, "4d261dc27c3d14578cc079d2d75422e6d8c4c604fca407e9e6fc76065b90e66f"},
	} {
		sum := sha256.Sum256(generate(t, c.opt))
		if got := hex.EncodeToString(sum[:]); got != c.want {
			t.Errorf("%+v: sha256 %s, want %s", c.opt, got, c.want)
		}
	}
}

// The model zoo's data (bench/zoo-bench.sh, examples/README.md: gen
// criteo --vocab 1000 --truth fm --interaction 2, seed 1) is the file its
// AUCs were measured on: its first 3,000 rows (a row does not depend on
// the file's length without drift) have the digest taken then. A change
// of the generator fails here, and the zoo's AUCs in bench/history-2026-12.md
// must be measured again.
func TestZooDataIsPinned(t *testing.T) {
	sum := sha256.Sum256(generate(t, Options{Rows: 3000, Seed: 1, Vocab: 1000, Truth: "fm", Interaction: 2}))
	if got, want := hex.EncodeToString(sum[:]), "8cfd0610c18cbfcedc2d4e740e32e568093c8ffc6dba40c5cb571be02177b79b"; got != want {
		t.Errorf("sha256 %s, want %s", got, want)
	}
}

// Truth fm and the history change the labels (and append the history),
// never the 39 features of a line.
func TestTruthAndHistoryKeepTheFeatures(t *testing.T) {
	base := lines(generate(t, Options{Rows: 3000, Seed: 2, Vocab: 50}))
	for _, opt := range []Options{{Truth: "fm"}, {History: 6}, {Truth: "fm", History: 3}, {Truth: "fm", Interaction: 3}} {
		opt.Rows, opt.Seed, opt.Vocab = 3000, 2, 50
		got := lines(generate(t, opt))
		differ := 0
		for i, f := range got {
			want := Fields
			if opt.History > 0 {
				want++
			}
			if len(f) != want || strings.Join(f[1:Fields], "\t") != strings.Join(base[i][1:], "\t") {
				t.Fatalf("%+v: line %d has %d fields, features %v; want %d fields and the features %v", opt, i+1, len(f), f[1:Fields], want, base[i][1:])
			}
			if f[0] != base[i][0] {
				differ++
			}
		}
		if differ < 100 {
			t.Errorf("%+v: only %d of 3000 labels differ from the linear truth's", opt, differ)
		}
	}
}

func lines(out []byte) [][]string {
	var ls [][]string
	for _, l := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		ls = append(ls, strings.Split(l, "\t"))
	}
	return ls
}

// truthOf recomputes a line's click probability from its fields alone, as
// the package doc states it: the linear part, the sum over pairs of
// informative columns of <v_i, v_j> times Interaction (for fm), and the
// history's interaction with C1 (each written out, pair by pair).
func truthOf(t *testing.T, f []string, opt Options, rank []map[string]uint32) float64 {
	t.Helper()
	first, inter := truthParts(t, f, opt, rank)
	return 1 / (1 + math.Exp(-(first + inter)))
}

// truthParts is a line's logit in two parts: the first-order one and the
// interactions (fm's pairs and the history).
func truthParts(t *testing.T, f []string, opt Options, rank []map[string]uint32) (first, inter float64) {
	t.Helper()
	opt = opt.withDefaults()
	z := bias
	if opt.Truth == "fm" {
		z = fmBias
	}
	for j, w := range intWeight {
		if x, err := strconv.ParseInt(f[1+j], 10, 64); err == nil && x > 0 {
			z += w * math.Log1p(float64(x))
		}
	}
	type id struct {
		c int
		k uint32
	}
	var present []id
	for c := 0; c < informative; c++ {
		if s := f[1+IntColumns+c]; s != "" {
			k, ok := rank[c][s]
			if !ok {
				t.Fatalf("column %d: id %s is not in the vocabulary", c, s)
			}
			z += weightOf(opt.Seed, c, k)
			present = append(present, id{c, k})
		}
	}
	vec := func(c int, k uint32) (v [FactorDim]float64) {
		for d := range v {
			v[d] = factorOf(opt.Seed, c, k, d)
		}
		return v
	}
	dot := func(a, b [FactorDim]float64) (s float64) {
		for d := range a {
			s += a[d] * b[d]
		}
		return s
	}
	var pairs float64
	if opt.Truth == "fm" {
		for i := range present {
			for j := i + 1; j < len(present); j++ {
				pairs += dot(vec(present[i].c, present[i].k), vec(present[j].c, present[j].k))
			}
		}
	}
	first, z = z, opt.Interaction*pairs
	if opt.History > 0 {
		z += historyBias
		item := f[1+IntColumns]
		if h := f[Fields]; h != "" && item != "" {
			items := strings.Split(h, string(HistorySeparator))
			v := vec(0, rank[0][item])
			for _, s := range items {
				k, ok := rank[0][s]
				if !ok {
					t.Fatalf("history id %s is not in C1's vocabulary", s)
				}
				z += historyWeight * dot(v, vec(0, k)) / math.Sqrt(float64(len(items)))
			}
		}
	}
	return first, z
}

// The probabilities written to Options.Probs are the truth of each line,
// recomputed from its fields by the documented formula, and each label is
// a draw from it (the log loss of the labels is that of such draws).
func TestProbsAreTheTruthOfEachLine(t *testing.T) {
	for _, opt := range []Options{{}, {Truth: "fm"}, {Truth: "fm", History: 5}, {History: 2}, {Truth: "fm", History: 3, Drift: 0.7},
		{Truth: "fm", Interaction: 2.5}, {Truth: "fm", History: 4, Interaction: 0.4}} {
		opt.Rows, opt.Seed, opt.Vocab = 4000, 3, 60
		var probs bytes.Buffer
		opt.Probs = &probs
		var out bytes.Buffer
		st, err := Generate(&out, opt)
		if err != nil {
			t.Fatal(err)
		}
		rank := make([]map[string]uint32, informative)
		for c := range rank {
			rank[c] = map[string]uint32{}
			for k := 0; k < opt.Vocab+int(opt.Drift*float64(opt.Vocab)); k++ { // every window's ids
				rank[c][string(appendHex(nil, idOf(opt.Seed, c, uint32(k))))] = uint32(k)
			}
		}
		ps := strings.Fields(probs.String())
		ls := lines(out.Bytes())
		if len(ps) != len(ls) || len(ls) != 4000 {
			t.Fatalf("%s: %d probabilities for %d lines", desc(opt), len(ps), len(ls))
		}
		var logLoss, sumP float64
		clicks := 0
		for i, f := range ls {
			got, err := strconv.ParseFloat(ps[i], 32)
			if err != nil {
				t.Fatal(err)
			}
			want := truthOf(t, f, opt, rank)
			if float32(want) != float32(got) && math.Abs(want-got) > 1e-6 {
				t.Fatalf("%s: line %d: probability %s written, the formula gives %g", desc(opt), i+1, ps[i], want)
			}
			sumP += got
			if f[0] == "1" {
				clicks++
				logLoss -= math.Log(got)
			} else {
				logLoss -= math.Log(1 - got)
			}
		}
		if int64(clicks) != st.Clicks || math.Abs(logLoss/4000-st.LogLoss) > 1e-9 {
			t.Errorf("%s: %d clicks, log loss %.6f; Stats say %d, %.6f", desc(opt), clicks, logLoss/4000, st.Clicks, st.LogLoss)
		}
		// The clicks are draws of p: their count is sum p within 4 sd.
		var varP float64
		for _, s := range ps {
			p, _ := strconv.ParseFloat(s, 64)
			varP += p * (1 - p)
		}
		if math.Abs(float64(clicks)-sumP) > 4*math.Sqrt(varP) {
			t.Errorf("%s: %d clicks, but the probabilities expect %.0f ± %.0f", desc(opt), clicks, sumP, math.Sqrt(varP))
		}
	}
}

// Stats.AUC and Stats.ExpectedAUC are the AUC of the written
// probabilities against the labels and its expectation, counted here pair
// by pair (ties 1/2).
func TestStatsAreTheAUCOfTheProbabilities(t *testing.T) {
	for _, opt := range []Options{{Vocab: 3}, {Truth: "fm", History: 4, Vocab: 40}} {
		opt.Rows, opt.Seed = 2500, 5
		var probs, out bytes.Buffer
		opt.Probs = &probs
		st, err := Generate(&out, opt)
		if err != nil {
			t.Fatal(err)
		}
		var p []float64
		for _, s := range strings.Fields(probs.String()) {
			v, _ := strconv.ParseFloat(s, 64)
			p = append(p, v)
		}
		var y []bool
		for _, f := range lines(out.Bytes()) {
			y = append(y, f[0] == "1")
		}
		var wins, pairs, ewin, epairs float64
		for i := range p {
			for j := range p {
				if i == j {
					continue
				}
				w := 0.0
				switch {
				case p[i] > p[j]:
					w = 1
				case p[i] == p[j]:
					w = 0.5
				}
				if y[i] && !y[j] {
					wins += w
					pairs++
				}
				ewin += p[i] * (1 - p[j]) * w
				epairs += p[i] * (1 - p[j])
			}
		}
		auc, exp := wins/pairs, ewin/epairs
		t.Logf("%s: AUC %.6f, expected %.6f", desc(opt), auc, exp)
		if math.Abs(st.AUC-auc) > 1e-12 || math.Abs(st.ExpectedAUC-exp) > 1e-9 {
			t.Errorf("%s: Stats AUC %.15f, expected %.15f; pair by pair %.15f, %.15f", desc(opt), st.AUC, st.ExpectedAUC, auc, exp)
		}
	}
}

// aucOf counts a tie of probabilities 1/2, in the AUC and in its
// expectation: rows drawn from five probabilities only, against the pair
// by pair count.
func TestAUCOfTies(t *testing.T) {
	levels := []float32{0.1, 0.25, 0.5, 0.7, 0.9}
	var ranked []uint64
	var p []float64
	var y []bool
	for i := 0; i < 600; i++ {
		v := levels[(i*7)%5]
		click := (i*13)%10 < int(10*v)
		b := uint64(math.Float32bits(v)) << 1
		if click {
			b |= 1
		}
		ranked, p, y = append(ranked, b), append(p, float64(v)), append(y, click)
	}
	var wins, pairs, ewin, epairs float64
	for i := range p {
		for j := range p {
			w := 0.0
			switch {
			case i == j:
				continue
			case p[i] > p[j]:
				w = 1
			case p[i] == p[j]:
				w = 0.5
			}
			if y[i] && !y[j] {
				wins, pairs = wins+w, pairs+1
			}
			ewin, epairs = ewin+p[i]*(1-p[j])*w, epairs+p[i]*(1-p[j])
		}
	}
	auc, exp := aucOf(ranked)
	if math.Abs(auc-wins/pairs) > 1e-12 || math.Abs(exp-ewin/epairs) > 1e-9 {
		t.Errorf("aucOf = %.12f, %.12f; pair by pair %.12f, %.12f", auc, exp, wins/pairs, ewin/epairs)
	}
}

func TestCheckTruthAndHistory(t *testing.T) {
	for _, c := range []struct {
		opt  Options
		want string
	}{
		{Options{Rows: 1, Truth: "deep"}, `truth must be linear or fm, got "deep"`},
		{Options{Rows: 1, History: -1}, "history (the most ids of the history column) must be in [0, 1000], got -1"},
		{Options{Rows: 1, Drift: -0.5}, "drift (the share of the vocabulary its window slides by over the file) must be >= 0"},
		{Options{Rows: 1, Vocab: 1 << 31, Drift: 1.5}, "with vocab x (1 + drift) at most 4294967295 ids, got 1.5"},
		{Options{Rows: 1, Truth: "fm", Interaction: -2}, "interaction (the factor of the fm truth's pairwise term) must be a number > 0, got -2"},
		{Options{Rows: 1, Truth: "fm", Interaction: math.NaN()}, "must be a number > 0, got NaN"},
		{Options{Rows: 1, Truth: "fm", Interaction: math.Inf(1)}, "must be a number > 0, got +Inf"},
		{Options{Rows: 1, Interaction: 2}, "interaction scales the pairwise term of truth fm; truth is linear: set truth fm too"},
		{Options{Rows: 1, Truth: "linear", History: 3, Interaction: 0.5}, "truth is linear: set truth fm too"},
	} {
		if _, err := Generate(&bytes.Buffer{}, c.opt); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: error %v, want %q", c.opt, err, c.want)
		}
	}
}

// desc names the options of a test case (without Probs).
func desc(o Options) string {
	return "truth " + o.Truth + " history " + strconv.Itoa(o.History) + " vocab " + strconv.Itoa(o.Vocab) + " drift " + strconv.FormatFloat(o.Drift, 'g', -1, 64) +
		" interaction " + strconv.FormatFloat(o.Interaction, 'g', -1, 64)
}

// ranksOf maps each id of the informative columns' vocabularies (no
// drift) to its rank.
func ranksOf(opt Options) []map[string]uint32 {
	rank := make([]map[string]uint32, informative)
	for c := range rank {
		rank[c] = map[string]uint32{}
		for k := 0; k < opt.Vocab; k++ {
			rank[c][string(appendHex(nil, idOf(opt.Seed, c, uint32(k))))] = uint32(k)
		}
	}
	return rank
}

// variance is the population variance of x, in two passes.
func variance(x []float64) float64 {
	var mean, v float64
	for _, e := range x {
		mean += e
	}
	mean /= float64(len(x))
	for _, e := range x {
		v += (e - mean) * (e - mean)
	}
	return v / float64(len(x))
}

// Stats.FirstOrderVar and Stats.InteractionVar are the variances over the
// rows of the logit's two parts, each recomputed from the line's fields.
func TestStatsVariancesOfTheLogitsParts(t *testing.T) {
	for _, opt := range []Options{{}, {Truth: "fm"}, {Truth: "fm", History: 4, Interaction: 1.7}, {History: 3}} {
		opt.Rows, opt.Seed, opt.Vocab = 3000, 6, 60
		var out bytes.Buffer
		st, err := Generate(&out, opt)
		if err != nil {
			t.Fatal(err)
		}
		rank := ranksOf(opt)
		var first, inter []float64
		for _, f := range lines(out.Bytes()) {
			a, b := truthParts(t, f, opt, rank)
			first, inter = append(first, a), append(inter, b)
		}
		wantF, wantI := variance(first), variance(inter)
		t.Logf("%s: first-order variance %.4f, interactions %.4f", desc(opt), wantF, wantI)
		if math.Abs(st.FirstOrderVar-wantF) > 1e-9*(1+wantF) || math.Abs(st.InteractionVar-wantI) > 1e-9*(1+wantI) {
			t.Errorf("%s: Stats say variances %.12f, %.12f; the lines' parts %.12f, %.12f", desc(opt), st.FirstOrderVar, st.InteractionVar, wantF, wantI)
		}
		if (opt.Truth == "fm" || opt.History > 0) != (wantI > 0.1) {
			t.Errorf("%s: interaction variance %.4f", desc(opt), wantI)
		}
	}
}

// aucOfScores is the AUC of scores against labels (ties 1/2), by ranks.
func aucOfScores(score []float64, click []bool) float64 {
	idx := make([]int, len(score))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(a, b int) bool { return score[idx[a]] < score[idx[b]] })
	var pos, neg, wins float64
	for i := 0; i < len(idx); {
		j := i
		var gp, gn float64
		for ; j < len(idx) && score[idx[j]] == score[idx[i]]; j++ {
			if click[idx[j]] {
				gp++
			} else {
				gn++
			}
		}
		wins += gp * (neg + gn/2)
		pos, neg, i = pos+gp, neg+gn, j
	}
	return wins / (pos * neg)
}

// Interaction S multiplies the fm truth's pairwise term: over the same
// rows (the features do not move) the first-order part of the logit stays
// and the interactions' variance grows as S squared; the file's
// Bayes-optimal AUC rises with S while what the first-order part alone
// scores against the labels falls.
func TestInteractionScalesThePairwiseTerm(t *testing.T) {
	var prev *Stats
	prevS, prevLinear := 0.0, 1.0
	for _, s := range []float64{0.3, 1, 3} {
		opt := Options{Rows: 20000, Seed: 8, Vocab: 100, Truth: "fm", Interaction: s}
		var out bytes.Buffer
		st, err := Generate(&out, opt)
		if err != nil {
			t.Fatal(err)
		}
		rank := ranksOf(opt)
		var first []float64
		var click []bool
		for _, f := range lines(out.Bytes()) {
			a, _ := truthParts(t, f, opt, rank)
			first, click = append(first, a), append(click, f[0] == "1")
		}
		linear := aucOfScores(first, click)
		t.Logf("interaction %g: click rate %.3f, Bayes AUC %.4f, the first-order part's AUC %.4f, variances %.3f (first order) and %.3f (interactions)",
			s, float64(st.Clicks)/float64(st.Rows), st.AUC, linear, st.FirstOrderVar, st.InteractionVar)
		if prev != nil {
			ratio := st.InteractionVar / prev.InteractionVar
			if st.FirstOrderVar != prev.FirstOrderVar || math.Abs(ratio-(s/prevS)*(s/prevS)) > 1e-9 {
				t.Errorf("interaction %g after %g: first-order variance %.12f after %.12f, interactions' variance x%.12f, want equal and x%.12f",
					s, prevS, st.FirstOrderVar, prev.FirstOrderVar, ratio, (s/prevS)*(s/prevS))
			}
			if !(st.AUC > prev.AUC+0.02) || !(linear < prevLinear-0.02) {
				t.Errorf("interaction %g after %g: Bayes AUC %.4f after %.4f, first-order part's AUC %.4f after %.4f; want the first up and the second down by 0.02",
					s, prevS, st.AUC, prev.AUC, linear, prevLinear)
			}
		}
		prev, prevS, prevLinear = st, s, linear
	}
}

// With Drift F a column's vocabulary window slides down by D =
// floor(F x Vocab) ids over the file (Window): of the distinct C1 ids of
// the last tenth of a file, the share the first tenth does not hold is
// the share of the last tenth's windows outside the first tenth's,
// computed here from the documented window [D - floor(D i / rows), ... +
// Vocab), and about min(1, 0.9 F / (1 + 0.1 F)); symmetrically, that
// share of the first tenth's ids is gone from the last tenth. (A
// vocabulary of 50 over 40,000 rows draws every id of the windows.)
func TestDriftShare(t *testing.T) {
	const rows, vocab = 40000, 50
	for _, f := range []float64{0.1, 0.5, 1, 2} {
		opt := Options{Rows: rows, Seed: 6, Vocab: vocab, Drift: f}
		ls := lines(generate(t, opt))
		first, last := map[string]bool{}, map[string]bool{}
		newDraws := 0
		for i, l := range ls {
			if id := l[1+IntColumns]; i < rows/10 {
				first[id] = true
			} else if i >= rows-rows/10 {
				last[id] = true
			}
		}
		for _, l := range ls[rows-rows/10:] {
			if !first[l[1+IntColumns]] {
				newDraws++
			}
		}
		share := func(a, b map[string]bool) float64 { // of a's ids, the share not in b
			n := 0
			for id := range a {
				if !b[id] {
					n++
				}
			}
			return float64(n) / float64(len(a))
		}
		gotNew, gotGone := share(last, first), share(first, last)
		// The documented windows: [lo(i), lo(i)+vocab), lo(i) = D - floor(D i / rows).
		d := math.Floor(f * vocab)
		lo := func(i int) float64 { return d - math.Floor(d*float64(i)/rows) }
		firstLo, firstHi := lo(rows/10-1), d+vocab           // the first tenth's ids
		lastLo, lastHi := lo(rows-1), lo(rows-rows/10)+vocab // the last tenth's
		overlap := math.Max(0, math.Min(firstHi, lastHi)-math.Max(firstLo, lastLo))
		wantNew, wantGone := 1-overlap/(lastHi-lastLo), 1-overlap/(firstHi-firstLo)
		approx := math.Min(1, 0.9*f/(1+0.1*f))
		t.Logf("drift %g: new ids %.3f of the last tenth's (windows %.3f, approximation %.3f), %.3f of its draws; gone %.3f of the first tenth's (windows %.3f)", f, gotNew, wantNew, approx, float64(newDraws)/(rows/10), gotGone, wantGone)
		if math.Abs(gotNew-wantNew) > 0.01 || math.Abs(wantNew-approx) > 0.02 {
			t.Errorf("drift %g: %.3f of the last tenth's ids are not in the first tenth; the windows say %.3f, the approximation %.3f", f, gotNew, wantNew, approx)
		}
		if f <= 1 && math.Abs(gotGone-wantGone) > 0.01 {
			t.Errorf("drift %g: %.3f of the first tenth's ids are gone from the last tenth; the windows say %.3f", f, gotGone, wantGone)
		}
		if got := opt.Window(0); got != uint64(d) {
			t.Errorf("drift %g: Window(0) = %d, want D = %g", f, got, d)
		}
	}
}

// Window is window of row i of a file written with opt: the first id
// index of every categorical column's vocabulary at that row.
func (o Options) Window(i int64) (first uint64) {
	return window(o.withDefaults().driftIDs(), i, o.Rows)
}
