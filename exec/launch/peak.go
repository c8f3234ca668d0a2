package launch

import (
	"fmt"
	"os"
	osexec "os/exec"
	"strconv"
	"strings"
	"sync"
)

// A child's peak resident memory is its own report, not the kernel's
// rusage of it: Go starts a child with vfork (CLONE_VM|CLONE_VFORK), and
// Linux folds the parent's resident size at exec into the child's
// ru_maxrss, so a 500 MiB parent reads back 500 MiB for /bin/true. The
// high-water mark of the child's own address space (VmHWM, read at exit)
// is the new image's alone (TestChildPeakIsItsOwn).
//
// The parent passes the child one end of a pipe and names it in
// PSGRAPH_PEAK_RSS as "FD PPID"; a psgraph process writes its peak there
// as it exits (ReportPeakRSS) when its parent's pid is PPID, so a
// grandchild that inherits the variable but not the pipe writes nothing.
const peakEnv = "PSGRAPH_PEAK_RSS"

// Peak is where a child started after Measure reports its peak resident
// memory.
type Peak struct {
	r, w  *os.File
	once  sync.Once
	bytes int64
}

// Measure asks c, a psgraph process not started yet, to report its own
// peak resident memory when it exits. Read it with Bytes after c.Wait.
func Measure(c *osexec.Cmd) (*Peak, error) {
	if !measured {
		return &Peak{}, nil
	}
	r, w, err := passPipe(c, peakEnv)
	if err != nil {
		return nil, err
	}
	return &Peak{r: r, w: w}, nil
}

// passPipe gives c, not started yet, the write end of a new pipe and
// names it in env as "FD PPID" (childPipe reads it back in the child).
func passPipe(c *osexec.Cmd, env string) (r, w *os.File, err error) {
	if r, w, err = os.Pipe(); err != nil {
		return nil, nil, err
	}
	c.ExtraFiles = append(c.ExtraFiles, w)
	if c.Env == nil {
		c.Env = os.Environ()
	}
	c.Env = append(c.Env, fmt.Sprintf("%s=%d %d", env, 2+len(c.ExtraFiles), os.Getpid()))
	return r, w, nil
}

// childPipe is, in a child, the pipe its parent passed in env (passPipe);
// nil without one, or when env was inherited from a grandparent.
func childPipe(env, name string) *os.File {
	fd, ppid, ok := strings.Cut(os.Getenv(env), " ")
	if !ok || ppid != strconv.Itoa(os.Getppid()) {
		return nil
	}
	n, err := strconv.Atoi(fd)
	if err != nil || n < 3 {
		return nil
	}
	return os.NewFile(uintptr(n), name)
}

// Bytes is the peak resident memory the child reported, in bytes: 0 when
// it reported none (it did not exit through psgraph's main, or this
// system does not measure it). Call it after the child exited (or failed
// to start); it closes the pipe, and later calls return the same figure.
func (p *Peak) Bytes() int64 {
	p.once.Do(func() {
		if p.r == nil {
			return
		}
		p.w.Close() // the child's copy closed when it exited: the read ends
		b := make([]byte, 64)
		n, _ := p.r.Read(b)
		p.r.Close()
		p.bytes, _ = strconv.ParseInt(strings.TrimSpace(string(b[:n])), 10, 64)
	})
	return p.bytes
}

// ReportPeakRSS writes this process's peak resident memory to the pipe
// its parent passed (Measure), if it did; psgraph's main calls it last.
func ReportPeakRSS() {
	f := childPipe(peakEnv, "peak-rss")
	if f == nil {
		return
	}
	defer f.Close()
	if peak := ownPeakRSS(); peak > 0 {
		fmt.Fprintf(f, "%d\n", peak)
	}
}
