// Package launch runs every role of a job as child processes of one
// binary on this machine: what `psgraph train` does. It prefixes each
// child's log lines with its role, stops all children when one fails or
// the context ends, and never leaves a child behind.
package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Child is one process of the job.
type Child struct {
	Name string   // "pserver-0", "trainer-1": the log prefix
	Args []string // arguments to the binary
	Env  []string // extra environment (KEY=value)
	// DropSchedTrace drops the Go runtime's scheduler traces from the
	// child's stderr: the rare "SCHED" line of SysmonNoPark's schedtrace
	// period, and the per-P, M and G lines that follow it when a child
	// dies of a fatal error (the error's own lines are kept).
	DropSchedTrace bool
	// Service marks a child that serves beside the job rather than runs
	// part of it (a serving replica, train --serve): the job is done when
	// every other child exited 0, and a service runs on until the context
	// ends (Options.JobDone); one that fails before fails the run.
	Service bool
	// Nice lowers the child's scheduling priority by this much once it
	// started (setpriority; nothing where the system has none): train
	// --serve gives the job's nodes JobNiceWithReplica, so on a machine
	// the two share the replica's requests come before the job's steps.
	Nice int
}

// Options configures a launch.
type Options struct {
	Binary string // the executable; default: this process's own
	// Log receives every child's stderr, each line prefixed with its name.
	Log io.Writer
	// Grace is how long a stopped child gets between SIGTERM and SIGKILL.
	Grace time.Duration
	// Stop, closed, passes SIGTERM on to every child and lets them end by
	// themselves, as the nodes of a job reading an online source do once
	// asked (at a step the trainers agree on, checkpointed): Run then
	// succeeds when every child exits 0. No child is killed for it; ctx
	// ending still stops them all at once.
	Stop <-chan struct{}
	// JobDone, when set, is called once every child but the services
	// exited 0, with their results; the services then run on until the
	// context ends, and Run returns nil after stopping them.
	JobDone func(*Result)
}

// Result is what the children wrote on stdout, their peak resident
// memory in bytes (each its own, as it reported it: peak.go) and how each
// ended (exit code or signal), by name.
type Result struct {
	Stdout  map[string][]byte
	PeakRSS map[string]int64
	State   map[string]*os.ProcessState
}

// ChildError reports the first child that failed.
type ChildError struct {
	Name string
	Code int    // exit code, -1 when killed by a signal
	Msg  string // its last error line on stderr
}

func (e *ChildError) Error() string {
	if e.Msg != "" {
		return fmt.Sprintf("%s failed (exit %d): %s", e.Name, e.Code, e.Msg)
	}
	return fmt.Sprintf("%s failed (exit %d)", e.Name, e.Code)
}

// Run starts every child and waits for all of them. It returns when all
// exited 0 (after opt.Stop too), or on the first failure after stopping
// the others, or when ctx ends after stopping them all.
func Run(ctx context.Context, children []Child, opt Options) (*Result, error) {
	bin := opt.Binary
	if bin == "" {
		var err error
		if bin, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("cannot find the psgraph binary to start the roles: %w", err)
		}
	}
	if opt.Log == nil {
		opt.Log = io.Discard
	}
	if opt.Grace <= 0 {
		opt.Grace = 3 * time.Second
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var logMu sync.Mutex
	var res *Result
	type exit struct {
		i   int
		err error
	}
	exits := make(chan exit, len(children))
	procs := make([]*osexec.Cmd, len(children))
	outs := make([]*bytes.Buffer, len(children))
	writers := make([]*prefixWriter, len(children))
	peaks := make([]*Peak, len(children))
	readies := make([]*ready, len(children))
	defer func() {
		for _, p := range peaks {
			if p != nil {
				p.Bytes() // closes the pipe of a child that never ran
			}
		}
	}()
	failed := -1
	for i, ch := range children {
		c := osexec.Command(bin, ch.Args...)
		c.Env = append(os.Environ(), ch.Env...)
		c.SysProcAttr = childAttr()
		var err error
		if peaks[i], err = Measure(c); err != nil {
			signalAll(procs[:i], syscall.SIGKILL)
			return nil, fmt.Errorf("starting %s: %w", ch.Name, err)
		}
		if readies[i], err = watchReady(c); err != nil {
			signalAll(procs[:i], syscall.SIGKILL)
			return nil, fmt.Errorf("starting %s: %w", ch.Name, err)
		}
		outs[i] = &bytes.Buffer{}
		c.Stdout = outs[i]
		pw := &prefixWriter{name: ch.Name, out: opt.Log, mu: &logMu, dropSched: ch.DropSchedTrace}
		c.Stderr = pw
		if err := c.Start(); err != nil {
			readies[i].abandon()
			signalAll(procs[:i], syscall.SIGKILL)
			return nil, fmt.Errorf("starting %s: %w", ch.Name, err)
		}
		readies[i].started()
		if ch.Nice != 0 {
			if err := setNice(c.Process.Pid, ch.Nice); err != nil {
				fmt.Fprintf(opt.Log, "%s: could not lower its priority to nice %d (%v); it runs at train's own priority, and a serving replica beside it may answer more slowly while the job runs\n", ch.Name, ch.Nice, err)
			}
		}
		procs[i] = c
		writers[i] = pw
	}
	for i := range procs {
		go func() {
			exits <- exit{i, procs[i].Wait()}
		}()
	}
	var first *ChildError
	running := len(procs)
	working := 0 // children that are not services, still running
	for _, ch := range children {
		if !ch.Service {
			working++
		}
	}
	jobDone := false
	exited := make([]bool, len(children))
	var kill <-chan time.Time
	done, asked := ctx.Done(), opt.Stop
	stop := func() {
		if kill == nil {
			signalAll(procs, syscall.SIGTERM)
			kill = time.After(opt.Grace)
		}
	}
	for running > 0 {
		select {
		case e := <-exits:
			running--
			exited[e.i] = true
			if !children[e.i].Service {
				working--
			}
			if working == 0 && !jobDone && first == nil && kill == nil && e.err == nil && running > 0 && opt.JobDone != nil {
				jobDone = true
				opt.JobDone(results(children, procs, outs, peaks, exited))
			}
			if e.err != nil && first == nil && kill == nil {
				code := -1
				var ee *osexec.ExitError
				if errors.As(e.err, &ee) {
					code = ee.ExitCode()
				}
				first = &ChildError{Name: children[e.i].Name, Code: code}
				failed = e.i
				stop()
			}
		case <-done:
			done = nil
			stop()
		case <-asked:
			asked = nil
			for i, c := range procs {
				go func() { // once the child takes it: before, SIGTERM would end it outright
					t := time.NewTimer(readyWait)
					defer t.Stop()
					select {
					case <-readies[i].ch:
					case <-t.C:
					}
					c.Process.Signal(syscall.SIGTERM)
				}()
			}
		case <-kill:
			signalAll(procs, syscall.SIGKILL)
		}
	}
	res = results(children, procs, outs, peaks, exited)
	if first != nil {
		first.Msg = writers[failed].lastErr
		return res, first
	}
	if err := ctx.Err(); err != nil && !jobDone {
		return res, err
	}
	return res, nil
}

// readyWait is how long Options.Stop's SIGTERM waits for a child that
// has not said it takes signals (ready.go): one that never will.
const readyWait = 10 * time.Second

// results is what the exited children wrote and how they ended.
// (A running child's peak is not read: Peak.Bytes waits for its exit.)
func results(children []Child, procs []*osexec.Cmd, outs []*bytes.Buffer, peaks []*Peak, exited []bool) *Result {
	res := &Result{Stdout: map[string][]byte{}, PeakRSS: map[string]int64{}, State: map[string]*os.ProcessState{}}
	for i, ch := range children {
		if st := procs[i].ProcessState; exited[i] && st != nil {
			res.Stdout[ch.Name] = outs[i].Bytes()
			res.PeakRSS[ch.Name] = peaks[i].Bytes()
			res.State[ch.Name] = st
		}
	}
	return res
}

// signalAll signals every started child (exited ones ignore it).
func signalAll(procs []*osexec.Cmd, sig os.Signal) {
	for _, c := range procs {
		if c != nil && c.Process != nil {
			c.Process.Signal(sig)
		}
	}
}

// prefixWriter copies a child's stderr to the log a line at a time, each
// line prefixed with the child's name, and remembers its last error line.
type prefixWriter struct {
	name    string
	out     io.Writer
	mu      *sync.Mutex
	partial []byte
	lastErr string
	// dropSched: lines of the runtime's scheduler trace are not copied.
	dropSched bool
	inSched   bool // the last line was of such a trace
}

// schedDetail reports whether l is a line of the runtime's detailed
// scheduler trace: "  P0: ...", "  M3: ...", "  G1: ...".
func schedDetail(l string) bool {
	r, ok := strings.CutPrefix(l, "  ")
	if !ok || len(r) < 3 || !strings.ContainsRune("PMG", rune(r[0])) {
		return false
	}
	i := 1
	for i < len(r) && r[i] >= '0' && r[i] <= '9' {
		i++
	}
	return i > 1 && i < len(r) && r[i] == ':'
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		w.line(string(w.partial[:i]))
		w.partial = w.partial[i+1:]
	}
	return len(p), nil
}

func (w *prefixWriter) line(l string) {
	if w.dropSched {
		// The runtime's trace: a "SCHED" line, and after it (in the dump
		// a schedtrace setting adds to a fatal error) one indented line
		// per P, M and G. The error itself, after the dump, is kept.
		if strings.HasPrefix(l, "SCHED ") {
			w.inSched = true
			return
		}
		if w.inSched && schedDetail(l) {
			return
		}
		w.inSched = false
	}
	if strings.HasPrefix(l, "psgraph: ") {
		w.lastErr = strings.TrimPrefix(l, "psgraph: ")
	}
	w.mu.Lock()
	fmt.Fprintf(w.out, "%-9s | %s\n", w.name, l)
	w.mu.Unlock()
}
