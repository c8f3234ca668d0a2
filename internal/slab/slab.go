package slab

// Slab hands out slices of one larger allocation at a time; the zero
// Slab is ready to use. A block stays alive while any slice of it does.
type Slab[T any] struct{ buf []T }

// Sized returns a Slab whose first block holds n elements: the exact
// room for a known number of them.
func Sized[T any](n int) Slab[T] { return Slab[T]{buf: make([]T, n)} }

// Take returns a new slice of n zero elements whose capacity is n, so
// that appending to it never writes into the next one's.
func (a *Slab[T]) Take(n int) []T {
	if a.buf == nil || len(a.buf) < n { // never nil, even for n = 0
		a.buf = make([]T, max(1024, n))
	}
	c := a.buf[:n:n]
	a.buf = a.buf[n:]
	return c
}

// One returns a pointer to a new zero element.
func (a *Slab[T]) One() *T { return &a.Take(1)[0] }

// Clone is append([]T{}, s...) (never nil) in the slab.
func (a *Slab[T]) Clone(s []T) []T {
	c := a.Take(len(s))
	copy(c, s)
	return c
}
