package evaluate

import (
	"errors"

	"github.com/psgraph/psgraph/exec/program"
)

// chunks is one pass over a streamed file in chunks, shared by the
// held-out evaluation and Predict: a program compiled at the chunk size
// holds each chunk's rows, and the file's shorter last chunk runs in a
// program compiled when the pass first meets it, so no pass counts the
// rows first. Both are compiled once per pass's owner, so a pass
// allocates nothing after the first.
type chunks struct {
	size        int
	full, last  *program.Program // last: the shorter last chunk's (nil: none yet)
	ffull, flst *program.Feeder
	compile     func(batch int) (*program.Program, *program.Feeder, error)
}

var errFileChanged = errors.New("the data file changed while it was read; do not write a data file during a run")

func newChunks(size int, compile func(batch int) (*program.Program, *program.Feeder, error)) (*chunks, error) {
	c := &chunks{size: size, compile: compile}
	var err error
	c.full, c.ffull, err = compile(size)
	return c, err
}

// program returns the program holding a chunk of n rows, which the file
// stream read into the full program's data tensors: the full program, or
// for a shorter chunk the last chunk's program with the rows copied in.
func (c *chunks) program(n int) (*program.Program, error) {
	if n >= c.size {
		return c.full, nil
	}
	if c.last == nil {
		var err error
		if c.last, c.flst, err = c.compile(n); err != nil {
			return nil, err
		}
	} else if n != c.last.Batch() {
		return nil, errFileChanged
	}
	c.flst.CopyPrefix(c.ffull)
	return c.last, nil
}

func (c *chunks) close() {
	if c.full != nil {
		c.full.Close()
	}
	if c.last != nil {
		c.last.Close()
	}
}
