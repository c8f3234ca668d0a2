package progress

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// tick is a clock that advances by step on every reading.
func tick(step time.Duration) func() time.Time {
	t := time.Unix(0, 0)
	return func() time.Time {
		t = t.Add(step)
		return t
	}
}

func lines(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		out = append(out, m)
	}
	return out
}

// A phase whose clock passes a second between counts logs each count with
// its total, share, rate and time left, then its end; the rate and the
// time left follow from the counts and the clock.
func TestSlowPhaseLogsProgress(t *testing.T) {
	var b bytes.Buffer
	r := &Reporter{Log: zerolog.New(&b), Now: tick(time.Second)}
	p := r.Start("drawing", "values", 400) // the clock reads 1 s
	for range 3 {
		p.Add(100) // 2 s, 3 s, 4 s
	}
	p.Done() // 5 s
	got := lines(t, &b)
	want := []map[string]any{
		{"message": "drawing", "done": "100 values", "of": "400 values", "pct": 25.0, "rate": "100 values/s", "eta": "3s"},
		{"message": "drawing", "done": "200 values", "of": "400 values", "pct": 50.0, "rate": "100 values/s", "eta": "2s"},
		{"message": "drawing", "done": "300 values", "of": "400 values", "pct": 75.0, "rate": "100 values/s", "eta": "1s"},
		{"message": "drawing: done", "done": "300 values", "seconds": "4.0"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d: %s", len(got), len(want), b.String())
	}
	for i := range want {
		for k, v := range want[i] {
			if got[i][k] != v {
				t.Errorf("line %d: %s = %v, want %v (%v)", i, k, got[i][k], v, got[i])
			}
		}
	}
}

// A phase that ends within its first interval logs nothing, an unknown
// total logs no share or time left, bytes are shown in MiB, and a nil
// reporter's phases do nothing.
func TestQuickPhaseIsQuiet(t *testing.T) {
	var b bytes.Buffer
	r := &Reporter{Log: zerolog.New(&b), Now: tick(time.Millisecond)}
	p := r.Start("quick", "rows", 10)
	p.Add(10)
	p.Done()
	if b.Len() != 0 {
		t.Errorf("a quick phase logged %q", b.String())
	}
	r = &Reporter{Log: zerolog.New(&b), Now: tick(2 * time.Second)}
	p = r.Start("reading", "bytes", -1)
	p.Add(3 << 20)
	got := lines(t, &b)
	if len(got) != 1 || got[0]["done"] != "3 MiB" || got[0]["rate"] != "1.5 MiB/s" && got[0]["rate"] != "2 MiB/s" || got[0]["of"] != nil || got[0]["eta"] != nil {
		t.Errorf("unknown total: %v", got)
	}
	var nilRep *Reporter
	q := nilRep.Start("x", "rows", 1)
	q.Add(1)
	q.Done()
}
