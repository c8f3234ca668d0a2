package progress

import (
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Reporter makes the phases of one run. A nil *Reporter makes nil phases,
// which report nothing, so code that reports progress runs unchanged where
// nobody watches it (tests, library callers).
type Reporter struct {
	Log zerolog.Logger
	// Every is the interval between two lines of a phase (0: one second).
	Every time.Duration
	// Now is the clock (nil: time.Now); tests inject one.
	Now func() time.Time
}

// Phase is one long phase of a run. Its Add may be called from several
// goroutines. Nothing is logged for a phase that ends within its first
// interval; a phase that logged a line logs its end too.
type Phase struct {
	r      *Reporter
	what   string
	unit   string // "bytes": counts are shown in MiB
	total  int64  // <= 0: unknown
	every  time.Duration
	mu     sync.Mutex
	done   int64
	start  time.Time
	next   time.Time // the first time at which a line is due
	logged bool
}

// Start begins a phase that does what (a present participle: "reading
// train.csv"), counting total units (rows, "bytes", values; <= 0 for an
// unknown total).
func (r *Reporter) Start(what, unit string, total int64) *Phase {
	if r == nil {
		return nil
	}
	p := &Phase{}
	r.Restart(p, what, unit, total)
	return p
}

// Restart begins a phase in p, which may have been used before: a phase
// that comes back (an evaluation every N steps) allocates nothing.
func (r *Reporter) Restart(p *Phase, what, unit string, total int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.r, p.what, p.unit, p.total, p.every = r, what, unit, total, r.Every
	if p.every <= 0 {
		p.every = time.Second
	}
	p.done, p.logged = 0, false
	p.start = r.now()
	p.next = p.start.Add(p.every)
}

func (r *Reporter) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

// Add counts n more units done and logs a line when one is due. It reads
// the clock on every call: call it every few thousand rows, not per row.
func (p *Phase) Add(n int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	now := p.r.now()
	if now.Before(p.next) {
		return
	}
	p.next = now.Add(p.every)
	p.logged = true
	el := now.Sub(p.start)
	ev := p.r.Log.Info().Str("done", p.format(p.done))
	rate := float64(p.done) / el.Seconds()
	if p.total > 0 {
		ev = ev.Str("of", p.format(p.total)).Int64("pct", 100*p.done/p.total)
		if rate > 0 {
			left := time.Duration(float64(p.total-p.done) / rate * float64(time.Second))
			ev = ev.Str("eta", left.Round(time.Second).String())
		}
	}
	ev.Str("rate", p.format(int64(rate))+"/s").Msg(p.what)
}

// Done ends the phase: a phase that logged progress logs its end and its
// time, so the log shows where the next phase starts.
func (p *Phase) Done() {
	if p == nil || p.r == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.logged {
		return
	}
	el := p.r.now().Sub(p.start)
	p.r.Log.Info().Str("done", p.format(p.done)).Str("seconds", fmt.Sprintf("%.1f", el.Seconds())).Msg(p.what + ": done")
}

func (p *Phase) format(n int64) string {
	if p.unit == "bytes" {
		return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%d %s", n, p.unit)
}
