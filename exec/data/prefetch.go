package data

import "github.com/psgraph/psgraph/exec/tensor"

// Prefetch fills the next batch of a file's stream while the caller's
// step computes: after Fill of step k's rows, Ahead(start of step k+1)
// has a goroutine parse those rows into tensors of its own, and the next
// Fill of that start waits for them and copies them in (a few dozen KiB)
// instead of parsing on the step's path. The batches are the source's
// own: Fill of a FileStream is a function of its start (it seeks there),
// so a batch parsed ahead equals the one parsed on demand, its error
// included. A Fill of another start than the one parsed ahead drops it
// and reads its own, as the source would. Only one goroutine calls the
// source at a time; after Close, every Fill reads on demand and the
// source is the caller's again.
type Prefetch struct {
	src   Batches
	req   chan int64
	res   chan error
	bufs  []*tensor.Tensor
	ahead int64 // the start being parsed ahead, while pending
	// served counts the Fills that took the batch parsed ahead
	served int
	// pending: a batch is being parsed (or was) ahead, not yet taken
	pending, started, closed bool
}

// NewPrefetch is a Prefetch of src.
func NewPrefetch(src Batches) *Prefetch {
	return &Prefetch{src: src, req: make(chan int64), res: make(chan error, 1)}
}

// Fill writes stream rows [start, start+batch) into dst (Batches).
func (p *Prefetch) Fill(start int64, dst []*tensor.Tensor) error {
	if p.pending {
		err := <-p.res
		p.pending = false
		if p.ahead == start && p.fits(dst) {
			p.served++
			for i, t := range dst {
				if t != nil {
					copy(t.F, p.bufs[i].F)
					copy(t.I, p.bufs[i].I)
					copy(t.L, p.bufs[i].L)
				}
			}
			return err
		}
	}
	if p.bufs == nil {
		p.bufs = make([]*tensor.Tensor, len(dst))
		for i, t := range dst {
			if t != nil {
				p.bufs[i] = tensor.New(t.DType, t.Shape)
			}
		}
	}
	return p.src.Fill(start, dst)
}

// Served is how many Fills took the batch parsed ahead (Ahead) rather
// than reading their own: a Fill that finds it still being parsed waits
// for it, so the count is a function of the calls made, not of timing.
func (p *Prefetch) Served() int { return p.served }

// fits says whether the batch parsed ahead has dst's tensors' sizes.
func (p *Prefetch) fits(dst []*tensor.Tensor) bool {
	if len(dst) != len(p.bufs) {
		return false
	}
	for i, t := range dst {
		b := p.bufs[i]
		if (t == nil) != (b == nil) || t != nil && (len(t.F) != len(b.F) || len(t.I) != len(b.I) || len(t.L) != len(b.L)) {
			return false
		}
	}
	return true
}

// Ahead starts parsing the batch of start, which the next Fill is
// expected to ask for. It does nothing before the first Fill (which
// sizes the tensors), while a batch parsed ahead was not taken yet, or
// after Close.
func (p *Prefetch) Ahead(start int64) {
	if p.closed || p.pending || p.bufs == nil {
		return
	}
	if !p.started {
		p.started = true
		go p.run()
	}
	p.ahead, p.pending = start, true
	p.req <- start
}

func (p *Prefetch) run() {
	for start := range p.req {
		p.res <- p.src.Fill(start, p.bufs)
	}
}

// Close waits for a batch being parsed ahead and stops the goroutine; the
// source is the caller's again. It may be called more than once.
func (p *Prefetch) Close() {
	if p.closed {
		return
	}
	p.closed = true
	if p.pending {
		<-p.res
		p.pending = false
	}
	if p.started {
		close(p.req)
	}
}
