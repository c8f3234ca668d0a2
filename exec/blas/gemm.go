package blas

import (
	"runtime"
	"sync"
	"sync/atomic"
)

// kernel is a register-blocked micro-kernel computing an mr x nr tile of C
// from k steps: A(i, p) = a[i*ars+p*aks], B(p, j) = b[p*bstride+j].
// beta == 0 overwrites C.
type kernel struct {
	name   string
	mr, nr int
	lanes  int     // multiply-adds per cycle, for the cost model
	narrow *kernel // optional variant with a smaller nr, for narrow C
	fn     func(k int, a *float32, ars, aks int, b *float32, bstride int, c *float32, ldc int, alpha, beta float32)
}

var (
	// kernels lists the micro-kernels this CPU can run, best first.
	kernels []*kernel
	// active is the kernel Sgemm uses (the Go one without an assembly one);
	// nil selects gonum, the tests' reference.
	active *kernel
)

// Cache blocking (BLIS-style loop nest). kc*nr floats of B stay in L1 across
// the ir loop, the mc x kc block of A in L2, the kc x nc block of B in L3.
const (
	kcBlock = 256
	mcBlock = 192 // multiple of every mr (8, 6)
	ncBlock = 2048

	// A B operand with at most this many elements is read in place, without
	// packing, when its layout allows it.
	directMax = 1 << 19
	// Products with at least this many multiply-adds use the helper goroutines.
	parallelMin = 1 << 22
	maxTile     = 8 * 32
)

// view is a logical matrix: element (i, j) is at p[i*rs+j*cs].
type view struct {
	p      []float32
	rs, cs int
}

type scratch struct {
	a, b []float32
	tile [maxTile]float32
	blk  block
	par  parJob
	// serial keeps the products computed with s on the calling goroutine
	// (SgemmSerial).
	serial bool
}

// Scratch buffers live on a free list rather than in a sync.Pool, so a GC
// does not drop them (packing buffers can be MiBs). Concurrent callers beyond
// the list's capacity get (and then drop) fresh ones.
var scratchFree = make(chan *scratch, 16)

func getScratch() *scratch {
	select {
	case s := <-scratchFree:
		return s
	default:
		return new(scratch)
	}
}

func putScratch(s *scratch) {
	select {
	case scratchFree <- s:
	default:
	}
}

func grow(s []float32, n int) []float32 {
	if cap(s) < n {
		return make([]float32, n)
	}
	return s[:n]
}

// gemm computes C = alpha*A*B + beta*C with A m x k, B k x n, C m x n views,
// using the kernel kn. k >= 1.
func gemm(kn *kernel, m, n, k int, alpha float32, A, B view, beta float32, C view) {
	s := getScratch()
	defer putScratch(s)
	gemmIn(s, kn, m, n, k, alpha, A, B, beta, C)
}

// gemmIn is gemm with the scratch buffers s (SgemmBatch's products share one).
func gemmIn(s *scratch, kn *kernel, m, n, k int, alpha float32, A, B view, beta float32, C view) {
	nr := kn.nr
	aDirect, bDirect := directA(m, k, A), directB(m, n, k, B)

	par := !s.serial && m*n*k >= parallelMin && k >= 32 && helpers() > 0
	for jc := 0; jc < n; jc += ncBlock {
		nb := min(ncBlock, n-jc)
		// kc*nr floats of B stay in L1: narrow kernels take longer k blocks.
		kc := kcBlock * 32 / nr
		for pc := 0; pc < k; pc += kc {
			kb := min(kc, k-pc)
			bet := beta
			if pc > 0 {
				bet = 1
			}
			var bp []float32
			if bDirect {
				// Only the ragged last panel is packed.
				if r := nb % nr; r != 0 {
					s.b = grow(s.b, kb*nr)
					packB(s.b, B, pc, jc+nb-r, kb, r, nr)
					bp = s.b
				}
			} else {
				s.b = grow(s.b, kb*((nb+nr-1)/nr)*nr)
				packB(s.b, B, pc, jc, kb, nb, nr)
				bp = s.b
			}
			s.blk = block{kn: kn, A: A, B: B, C: C, bp: bp, bDirect: bDirect, aDirect: aDirect,
				jc: jc, nb: nb, pc: pc, kb: kb, alpha: alpha, beta: bet}
			if par {
				s.par.run(&s.blk, s, m)
			} else {
				for ic := 0; ic < m; ic += mcBlock {
					s.blk.macro(s, ic, min(mcBlock, m-ic), 0, nb)
				}
			}
		}
	}
	s.blk = block{}
}

// block is one (jc, pc) iteration: B packed (or read in place), A still to pack.
type block struct {
	kn               *kernel
	A, B, C          view
	bp               []float32 // packed B (when bDirect: its ragged last panel)
	aDirect, bDirect bool
	jc, nb, pc, kb   int
	alpha, beta      float32
}

// macro runs rows [ic, ic+mb) and block columns [jlo, jhi) (jlo a multiple
// of nr) of the block: packs that part of A and sweeps the micro-kernel over it.
func (blk *block) macro(s *scratch, ic, mb, jlo, jhi int) {
	kn := blk.kn
	mr, nr, kb := kn.mr, kn.nr, blk.kb
	A, B, C := blk.A, blk.B, blk.C
	var ap []float32
	if !blk.aDirect {
		s.a = grow(s.a, kb*((mb+mr-1)/mr)*mr)
		packA(s.a, A, ic, blk.pc, mb, kb, mr)
		ap = s.a
	} else if r := mb % mr; r != 0 {
		// Ragged last panel of an unpacked A: pack just that panel.
		s.a = grow(s.a, kb*mr)
		packA(s.a, A, ic+mb-r, blk.pc, r, kb, mr)
	}
	for jr := jlo; jr < jhi; jr += nr {
		nw := min(nr, jhi-jr)
		j0 := blk.jc + jr
		var bptr *float32
		bstride := nr
		switch {
		case !blk.bDirect:
			bptr = &blk.bp[jr*kb]
		case nw == nr:
			bptr = &B.p[blk.pc*B.rs+j0]
			bstride = B.rs
		default:
			bptr = &blk.bp[0] // ragged panel packed by gemm
		}
		for ir := 0; ir < mb; ir += mr {
			mh := min(mr, mb-ir)
			i0 := ic + ir
			var aptr *float32
			ars, aks := 1, mr
			if blk.aDirect && mh == mr {
				aptr = &A.p[i0*A.rs+blk.pc*A.cs]
				ars, aks = A.rs, A.cs
			} else if blk.aDirect {
				aptr = &s.a[0] // ragged panel, packed above
			} else {
				aptr = &ap[ir*kb]
			}
			if mh == mr && nw == nr && C.cs == 1 {
				kn.fn(kb, aptr, ars, aks, bptr, bstride, &C.p[i0*C.rs+j0], C.rs, blk.alpha, blk.beta)
				continue
			}
			t := s.tile[:mr*nr]
			kn.fn(kb, aptr, ars, aks, bptr, bstride, &t[0], nr, blk.alpha, 0)
			mergeTile(t, nr, mh, nw, C, i0, j0, blk.beta)
		}
	}
}

// A is read in place: the kernel takes any A strides (measured no slower than
// packing, up to 4096x4096). B is read in place up to directMax elements when
// nr values are contiguous per k step. Only ragged panels are packed then.
// forcePack (tests only) packs both operands fully.
func directA(m, k int, A view) bool { return !forcePack }

// directB: B is read in place when it is small, or when A has so few rows
// (a skinny product such as a batch of 8 through a 4096x4096 weight) that
// every element of B is used by one or two row panels only, so packing it
// would cost a full extra pass over B for nothing.
func directB(m, n, k int, B view) bool {
	return !forcePack && B.cs == 1 && (k*n <= directMax || m <= skinnyRows)
}

const skinnyRows = 16

var forcePack bool

// cost estimates the cycles of gemm(kn, m, n, k, A, B, C): micro-kernel work
// including padded lanes, plus packing and edge merging.
func cost(kn *kernel, m, n, k int, A, B, C view) float64 {
	mr, nr := kn.mr, kn.nr
	c := float64(padded(m, mr)*padded(n, nr)*k) / float64(kn.lanes)
	if directA(m, k, A) {
		c += float64(m%mr*k) * 0.5
	} else if A.rs == 1 {
		c += float64(m*k) * 0.3
	} else {
		c += float64(m * k)
	}
	if directB(m, n, k, B) {
		c += float64(n%nr*k) * 0.3
	} else if B.cs == 1 {
		c += float64(n*k) * 0.3
	} else {
		c += float64(n * k)
	}
	if C.cs != 1 {
		c += float64(m*n) * 1.5
	} else {
		c += float64(m%mr*n+n%nr*m) * 0.5
	}
	return c
}

// mergeTile stores the mh x nw corner of tile t into C at (i0, j0): C = t + beta*C.
func mergeTile(t []float32, nr, mh, nw int, C view, i0, j0 int, beta float32) {
	for i := 0; i < mh; i++ {
		tr := t[i*nr : i*nr+nw]
		base := (i0+i)*C.rs + j0*C.cs
		if C.cs == 1 {
			cr := C.p[base : base+nw]
			if beta == 0 {
				copy(cr, tr)
			} else {
				for j, v := range tr {
					cr[j] = v + beta*cr[j]
				}
			}
			continue
		}
		for j, v := range tr {
			o := base + j*C.cs
			if beta == 0 {
				C.p[o] = v
			} else {
				C.p[o] = v + beta*C.p[o]
			}
		}
	}
}

// packA packs rows [i0, i0+mb) x cols [p0, p0+kb) of A into panels of mr rows:
// panel q holds, for each p, the mr values A(q*mr+i, p), zero padded.
func packA(dst []float32, A view, i0, p0, mb, kb, mr int) {
	for q := 0; q < mb; q += mr {
		mh := min(mr, mb-q)
		d := dst[q*kb : q*kb+kb*mr]
		if A.rs == 1 {
			for p := 0; p < kb; p++ {
				o := (i0 + q) + (p0+p)*A.cs
				dd := d[p*mr : p*mr+mr]
				copy(dd, A.p[o:o+mh])
				clear(dd[mh:])
			}
			continue
		}
		for i := 0; i < mh; i++ {
			packLane(d, A.p, (i0+q+i)*A.rs+p0*A.cs, A.cs, kb, mr, i)
		}
		clearLanes(d, kb, mh, mr)
	}
}

// packB packs rows [p0, p0+kb) x cols [j0, j0+nb) of B into panels of nr
// columns: panel q holds, for each p, the nr values B(p, q*nr+j), zero padded.
func packB(dst []float32, B view, p0, j0, kb, nb, nr int) {
	for q := 0; q < nb; q += nr {
		nw := min(nr, nb-q)
		d := dst[q*kb : q*kb+kb*nr]
		if B.cs == 1 {
			for p := 0; p < kb; p++ {
				o := (p0+p)*B.rs + j0 + q
				dd := d[p*nr : p*nr+nr]
				copy(dd, B.p[o:o+nw])
				clear(dd[nw:])
			}
			continue
		}
		j := 0
		if B.rs == 1 {
			// A transposed operand: four of its rows at a time, so that each
			// packed row gets four neighbouring values per store group.
			for ; j+4 <= nw; j += 4 {
				o := p0 + (j0+q+j)*B.cs
				s0 := B.p[o : o+kb]
				s1 := B.p[o+B.cs : o+B.cs+kb][:len(s0)]
				s2 := B.p[o+2*B.cs : o+2*B.cs+kb][:len(s0)]
				s3 := B.p[o+3*B.cs : o+3*B.cs+kb][:len(s0)]
				for p := range s0 {
					dd := d[p*nr+j : p*nr+j+4]
					dd[0], dd[1], dd[2], dd[3] = s0[p], s1[p], s2[p], s3[p]
				}
			}
		}
		for ; j < nw; j++ {
			packLane(d, B.p, p0*B.rs+(j0+q+j)*B.cs, B.rs, kb, nr, j)
		}
		clearLanes(d, kb, nw, nr)
	}
}

// packLane writes kb values of x, from offset o at stride s, into lane i
// of a panel d of w lanes: value p goes to d[p*w+i]. It packs one row of
// A (packA) or one column of B (packB).
func packLane(d, x []float32, o, s, kb, w, i int) {
	if s == 1 {
		for p, v := range x[o : o+kb] {
			d[p*w+i] = v
		}
		return
	}
	for p := 0; p < kb; p++ {
		d[p*w+i] = x[o+p*s]
	}
}

// clearLanes zeroes lanes [from, w) of the kb values of a panel d of w
// lanes: the padding of a panel narrower than the kernel.
func clearLanes(d []float32, kb, from, w int) {
	for i := from; i < w; i++ {
		for p := 0; p < kb; p++ {
			d[p*w+i] = 0
		}
	}
}

// Parallel execution: a few persistent helper goroutines take row chunks of
// a block alongside the calling goroutine. A busy helper is simply skipped,
// so concurrent callers never wait on one another.
type parJob struct {
	blk   *block
	m     int
	cols  bool // chunks are column ranges (all rows) rather than row ranges
	chunk int
	next  atomic.Int64
	wg    sync.WaitGroup
}

var (
	// parRuns counts the blocks shared with the helpers (for the tests).
	parRuns    atomic.Int64
	helperOnce sync.Once
	helperCh   chan *parJob
	nHelpers   int
)

// SharedBlocks is how many blocks of products were offered to the helper
// goroutines since the process started (each k block of a product of at
// least 4 M multiply-adds, with more than one core): what SgemmSerial
// keeps to the calling goroutine.
func SharedBlocks() int64 { return parRuns.Load() }

func helpers() int {
	helperOnce.Do(func() {
		nHelpers = min(runtime.GOMAXPROCS(0)-1, 7)
		if nHelpers <= 0 {
			nHelpers = 0
			return
		}
		helperCh = make(chan *parJob)
		for i := 0; i < nHelpers; i++ {
			go func() {
				for j := range helperCh {
					s := getScratch()
					j.work(s)
					putScratch(s)
					j.wg.Done()
				}
			}()
		}
	})
	return nHelpers
}

func (j *parJob) work(s *scratch) {
	for {
		c := int(j.next.Add(1)) - 1
		if j.cols {
			jlo := c * j.chunk
			if jlo >= j.blk.nb {
				return
			}
			jhi := min(jlo+j.chunk, j.blk.nb)
			for ic := 0; ic < j.m; ic += mcBlock {
				j.blk.macro(s, ic, min(mcBlock, j.m-ic), jlo, jhi)
			}
			continue
		}
		ic := c * j.chunk
		if ic >= j.m {
			return
		}
		j.blk.macro(s, ic, min(j.chunk, j.m-ic), 0, j.blk.nb)
	}
}

func (j *parJob) run(blk *block, s *scratch, m int) {
	parRuns.Add(1)
	mr, nr := blk.kn.mr, blk.kn.nr
	workers := nHelpers + 1
	// Split the longer side into enough chunks to balance: rows in multiples
	// of mr (at most mcBlock), or columns in multiples of nr, so that a short
	// and wide C still shares each B panel among all its rows.
	j.cols = m < blk.nb
	if j.cols {
		chunk := (blk.nb + 2*workers - 1) / (2 * workers)
		j.chunk = (chunk + nr - 1) / nr * nr
	} else {
		chunk := (m + 2*workers - 1) / (2 * workers)
		j.chunk = min(mcBlock, (chunk+mr-1)/mr*mr)
	}
	j.blk, j.m = blk, m
	j.next.Store(0)
	for i := 0; i < nHelpers; i++ {
		j.wg.Add(1)
		select {
		case helperCh <- j:
		default:
			j.wg.Done()
		}
	}
	j.work(s)
	j.wg.Wait()
	j.blk = nil
}
