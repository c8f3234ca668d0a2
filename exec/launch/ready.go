package launch

import (
	"os"
	osexec "os/exec"
)

// A child of Run says when it takes signals: until its handler is
// installed, SIGTERM ends a Go process outright, and a node of a job
// reading an online source must take it to stop with its job. The parent
// passes the child one end of a pipe named in PSGRAPH_READY as "FD PPID";
// psgraph's Main writes a byte there once it handles SIGTERM and SIGINT
// (SignalReady). Run passes Options.Stop's SIGTERM on to a child once it
// is ready (or has exited, or readyWait passed: a child that never says
// so).
const readyEnv = "PSGRAPH_READY"

// ready is a child's readiness, watched through its pipe.
type ready struct {
	r, w *os.File
	ch   chan struct{} // closed at the child's byte, or when it exited
}

// watchReady asks c, not started yet, to say when it takes signals.
func watchReady(c *osexec.Cmd) (*ready, error) {
	r, w, err := passPipe(c, readyEnv)
	if err != nil {
		return nil, err
	}
	return &ready{r: r, w: w, ch: make(chan struct{})}, nil
}

// started closes the parent's copy of the child's end, once it started,
// and watches the pipe: its first byte, or its end when the child exits.
func (rd *ready) started() {
	rd.w.Close()
	go func() {
		b := make([]byte, 1)
		rd.r.Read(b)
		close(rd.ch)
		rd.r.Close()
	}()
}

// abandon releases the pipe of a child that never started.
func (rd *ready) abandon() {
	rd.w.Close()
	rd.r.Close()
}

// SignalReady tells the parent that passed a pipe (Run) that this process
// takes SIGTERM and SIGINT now; psgraph's Main calls it once it handles
// them.
func SignalReady() {
	if f := childPipe(readyEnv, "ready"); f != nil {
		f.Write([]byte{1})
		f.Close()
	}
}
