package job

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/psgraph/psgraph/dsl/ir"
	"github.com/psgraph/psgraph/exec/data"
	"github.com/psgraph/psgraph/exec/data/criteo"
	"github.com/psgraph/psgraph/exec/program"
	"github.com/psgraph/psgraph/internal/testfix"
)

// TestDynamicTTLOverDriftingPasses trains examples/ctr-dynamic.yaml
// (min_count 1, ttl_steps 30) for 10 passes (-long; 3 without) over a generated file whose
// vocabulary drifts (psgraph gen criteo --rows 25600 --vocab 20000
// --drift 1 --seed 1: 100 steps of 256 rows a pass). After every step
// the table's live rows must be exactly the distinct keys fed in the
// last 30 steps (counted here from the fed batches), so they stay
// bounded by what 30 steps hold instead of growing to the file's
// distinct keys; every pass ends with the same live rows and peaks no
// higher than the second; the table's bytes at the end of the last pass
// are no more than at the end of the second, and the rows it holds (live
// plus expired, not yet freed) within 5% of the live peak: expired rows'
// memory is reused. -v prints the
// numbers per pass (bench/history-2026-12.md).
func TestDynamicTTLOverDriftingPasses(t *testing.T) {
	if testing.Short() {
		t.Skip("passes of 100 steps")
	}
	const (
		rows, vocab, batch, ttl = 25600, 20000, 256, 30
		steps                   = rows / batch
	)
	passes := 3 // the second's peak and bytes against a later pass's
	if testfix.IsLong() {
		passes = 10
	}
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "drift.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := criteo.Generate(f, criteo.Options{Rows: rows, Seed: 1, Vocab: vocab, Drift: 1}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	src, err := os.ReadFile("../../examples/ctr-dynamic.yaml")
	if err != nil {
		t.Fatal(err)
	}
	model := strings.NewReplacer("min_count: 2, ttl_steps: 2000", "min_count: 1, ttl_steps: 30", "csv: data/ctr-drift.tsv", "csv: drift.tsv").Replace(string(src))
	if !strings.Contains(model, "ttl_steps: 30") || !strings.Contains(model, "batch: 256") {
		t.Fatal("examples/ctr-dynamic.yaml changed: update the replacements")
	}
	g := sparseModelAt(t, filepath.Join(dir, "m.yaml"), []byte(model))
	p, err := program.Compile(g, program.CompileOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := program.Init(p, program.InitOptions{From: ""}); err != nil {
		t.Fatal(err)
	}
	fs, err := data.OpenStream(g.Data)
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	feed := program.NewFeeder(g, p.Scope)
	rt := &program.Runtime{Ctx: context.Background()}
	table := p.Tables["emb"]

	// The reference: each key's last step, and how many keys have each
	// step as their last (live at step k: last in (k-ttl, k]).
	last := map[int64]int{}
	lastAt := make([]int, passes*steps)
	peak := make([]int64, passes)
	endLive, endHeld, endBytes := make([]int64, passes), make([]int64, passes), make([]int64, passes)
	for k := range passes * steps {
		if err := feed.Fill(fs, int64(k)*batch); err != nil {
			t.Fatal(err)
		}
		for _, key := range p.Scope["cat"].L {
			if key == ir.PadKey {
				continue
			}
			if s, ok := last[key]; ok {
				lastAt[s]--
			}
			last[key] = k
			lastAt[k]++
		}
		rt.StepNum = int64(k)
		if err := p.Run(rt); err != nil {
			t.Fatal(err)
		}
		want := 0
		for s := max(0, k-ttl+1); s <= k; s++ {
			want += lastAt[s]
		}
		st := table.Stats()
		if st.Live != int64(want) {
			t.Fatalf("step %d: %d live rows, want the %d distinct keys of the last %d steps", k, st.Live, want, ttl)
		}
		pass := k / steps
		peak[pass] = max(peak[pass], st.Live)
		if k%steps == steps-1 {
			endLive[pass], endHeld[pass], endBytes[pass] = st.Live, st.Held, st.Bytes.Total()
			t.Logf("pass %d: live rows %d at its end, at most %d; held %d; %d bytes; %d distinct keys fed so far; admitted %d, expired %d",
				pass+1, st.Live, peak[pass], st.Held, st.Bytes.Total(), len(last), st.Admitted, st.EvictedTTL)
		}
	}
	for pass := 1; pass < passes; pass++ {
		if endLive[pass] != endLive[0] {
			t.Errorf("pass %d ends with %d live rows, the first with %d", pass+1, endLive[pass], endLive[0])
		}
		if peak[pass] > peak[1] {
			t.Errorf("pass %d peaks at %d live rows, over the second pass's %d: live rows grow with passes", pass+1, peak[pass], peak[1])
		}
	}
	if peak[passes-1]*2 > int64(len(last)) {
		t.Errorf("live rows peak at %d of the file's %d distinct keys: the ttl bounds nothing", peak[passes-1], len(last))
	}
	if endBytes[passes-1] > endBytes[1] {
		t.Errorf("memory grows with passes: %d bytes after the last pass, %d after the second", endBytes[passes-1], endBytes[1])
	}
	if held := endHeld[passes-1]; held > peak[1]+peak[1]/20 {
		t.Errorf("%d rows held after the last pass, over 1.05 x the %d live at most: expired rows are not freed", held, peak[1])
	}
}
