//go:build unix

package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The test binary is also the children: with LAUNCH_TEST_CHILD set,
// TestMain runs helperChild instead of the tests, and with
// LAUNCH_TEST_LAUNCHER set it launches such children itself.
func TestMain(m *testing.M) {
	if mode := os.Getenv("LAUNCH_TEST_CHILD"); mode != "" {
		code := helperChild(mode)
		ReportPeakRSS() // as psgraph's main does
		os.Exit(code)
	}
	if dir := os.Getenv("LAUNCH_TEST_LAUNCHER"); dir != "" {
		_, err := Run(context.Background(), []Child{child(dir, "pserver-0", "ignore"), child(dir, "trainer-0", "ignore")}, Options{})
		fmt.Fprintln(os.Stderr, "launcher: Run returned:", err)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// child is a Child of the test binary in the given mode; it records its
// pid and the signals it gets in dir.
func child(dir, name, mode string, extra ...string) Child {
	return Child{Name: name, Env: append([]string{"LAUNCH_TEST_CHILD=" + mode, "LAUNCH_TEST_DIR=" + dir, "LAUNCH_TEST_NAME=" + name}, extra...)}
}

// helperChild runs a child:
//
//	ok:     prints two lines on stdout and exits 0
//	term:   exits 0 on SIGTERM
//	ignore: stays on SIGTERM (to be killed)
//	fail:   once the children in LAUNCH_TEST_WAIT are ready, logs an error and exits 3
//
// Every child writes NAME.pid once its signal handler is installed (after
// LAUNCH_TEST_LATE, when set) and appends each signal it receives to
// NAME.signals.
func helperChild(mode string) int {
	dir, name := os.Getenv("LAUNCH_TEST_DIR"), os.Getenv("LAUNCH_TEST_NAME")
	if late, err := time.ParseDuration(os.Getenv("LAUNCH_TEST_LATE")); err == nil {
		time.Sleep(late) // a slow start: SIGTERM now would end the process
	}
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM)
	SignalReady() // as psgraph's Main does
	tmp := filepath.Join(dir, name+".pid.tmp")
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		return 10
	}
	if err := os.Rename(tmp, filepath.Join(dir, name+".pid")); err != nil {
		return 10
	}
	record := func(s os.Signal) {
		f, err := os.OpenFile(filepath.Join(dir, name+".signals"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			fmt.Fprintln(f, s)
			f.Close()
		}
	}
	// A child the test forgot must not run for ever.
	orphaned := time.After(2 * time.Minute)
	switch mode {
	case "ok":
		fmt.Printf("%s working\n{\"role\":%q}\n", name, name)
		fmt.Fprintf(os.Stderr, "%s: a log line\n", name)
		return 0
	case "fail":
		var wait []string
		if w := os.Getenv("LAUNCH_TEST_WAIT"); w != "" {
			wait = strings.Split(w, ",")
		}
		for _, other := range wait {
			if err := waitFor(filepath.Join(dir, other+".pid"), time.Minute); err != nil {
				fmt.Fprintf(os.Stderr, "psgraph: %v\n", err)
				return 11
			}
		}
		fmt.Fprintf(os.Stderr, "%s: about to fail\npsgraph: %s: boom: the test asked for it\n", name, name)
		return 3
	case "term", "ignore":
		for {
			select {
			case s := <-sigs:
				record(s)
				if mode == "term" {
					return 0
				}
			case <-orphaned:
				return 12
			}
		}
	}
	return 13
}

// waitFor waits until path exists.
func waitFor(path string, within time.Duration) error {
	for deadline := time.Now().Add(within); ; {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear within %v", path, within)
		}
		time.Sleep(5 * time.Millisecond) // polling a file another process writes
	}
}

func readPID(t *testing.T, dir, name string) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name+".pid"))
	if err != nil {
		t.Fatalf("%s never started: %v", name, err)
	}
	pid, err := strconv.Atoi(string(b))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

func signalsOf(t *testing.T, dir, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, name+".signals"))
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// gone reports whether no process pid exists any more (a zombie that
// nobody reaped counts as gone: it runs nothing).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false // no /proc: trust kill
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && strings.HasPrefix(s[i+1:], " Z")
}

// A child that fails makes Run stop the others: each gets SIGTERM; one
// that exits on it is not killed, one that ignores it gets SIGKILL after
// the grace period. Run returns the failed child's name, exit code and
// last error line, and no child is left when it returns.
func TestFailingChildStopsTheOthers(t *testing.T) {
	dir := t.TempDir()
	children := []Child{
		child(dir, "pserver-0", "term"),
		child(dir, "pserver-1", "ignore"),
		child(dir, "trainer-0", "fail", "LAUNCH_TEST_WAIT=pserver-0,pserver-1"),
	}
	var log bytes.Buffer
	res, err := Run(context.Background(), children, Options{Log: &log, Grace: 2 * time.Second})
	var ce *ChildError
	if !errors.As(err, &ce) {
		t.Fatalf("Run: %v, want a *ChildError", err)
	}
	if ce.Name != "trainer-0" || ce.Code != 3 || ce.Msg != "trainer-0: boom: the test asked for it" {
		t.Errorf("ChildError %+v, want trainer-0, exit 3, its last psgraph: line", *ce)
	}
	if want := "trainer-0 failed (exit 3): trainer-0: boom: the test asked for it"; err.Error() != want {
		t.Errorf("error %q, want %q", err, want)
	}
	if got := signalsOf(t, dir, "pserver-0"); got != "terminated\n" {
		t.Errorf("pserver-0 received %q, want one SIGTERM", got)
	}
	if got := signalsOf(t, dir, "pserver-1"); got != "terminated\n" {
		t.Errorf("pserver-1 received %q, want one SIGTERM (then SIGKILL, which it cannot record)", got)
	}
	if got := signalsOf(t, dir, "trainer-0"); got != "" {
		t.Errorf("trainer-0, which failed by itself, received %q", got)
	}
	states := map[string]string{
		"pserver-0": "exit status 0",  // left on SIGTERM
		"pserver-1": "signal: killed", // SIGKILL after the grace period
		"trainer-0": "exit status 3",
	}
	for name, want := range states {
		if st := res.State[name]; st == nil || st.String() != want {
			t.Errorf("%s ended with %v, want %s", name, st, want)
		}
	}
	for _, ch := range children {
		if pid := readPID(t, dir, ch.Name); !gone(pid) {
			t.Errorf("%s (pid %d) outlived Run", ch.Name, pid)
		}
	}
	if !strings.Contains(log.String(), "trainer-0 | psgraph: trainer-0: boom") {
		t.Errorf("the log lacks trainer-0's error line, prefixed:\n%s", log.String())
	}
}

// Children that all succeed: Run returns what each wrote on stdout, its
// peak memory, and no error; stderr lines reach the log prefixed.
func TestAllChildrenSucceed(t *testing.T) {
	dir := t.TempDir()
	children := []Child{child(dir, "pserver-0", "ok"), child(dir, "trainer-0", "ok")}
	var log bytes.Buffer
	res, err := Run(context.Background(), children, Options{Log: &log})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, ch := range children {
		if got, want := string(res.LastLine(ch.Name)), fmt.Sprintf("{\"role\":%q}", ch.Name); got != want {
			t.Errorf("%s's last stdout line %q, want %q", ch.Name, got, want)
		}
		if res.PeakRSS[ch.Name] <= 0 {
			t.Errorf("%s's peak RSS is %d", ch.Name, res.PeakRSS[ch.Name])
		}
		if st := res.State[ch.Name]; st == nil || !st.Success() {
			t.Errorf("%s ended with %v", ch.Name, st)
		}
		if want := fmt.Sprintf("%-9s | %s: a log line\n", ch.Name, ch.Name); !strings.Contains(log.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, log.String())
		}
		if got := signalsOf(t, dir, ch.Name); got != "" {
			t.Errorf("%s received %q", ch.Name, got)
		}
	}
}

// Cancelling the context stops every child with SIGTERM; Run returns the
// context's error, not a child's.
func TestCancelStopsEveryChild(t *testing.T) {
	dir := t.TempDir()
	children := []Child{child(dir, "pserver-0", "term"), child(dir, "trainer-0", "term")}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type ran struct {
		res *Result
		err error
	}
	done := make(chan ran, 1)
	go func() {
		res, err := Run(ctx, children, Options{Grace: time.Minute})
		done <- ran{res, err}
	}()
	for _, ch := range children {
		if err := waitFor(filepath.Join(dir, ch.Name+".pid"), time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	cancel()
	var r ran
	select {
	case r = <-done:
	case <-time.After(time.Minute): // the grace period: children that exit on SIGTERM end well before it
		t.Fatal("Run did not return within a minute of the cancel")
	}
	if !errors.Is(r.err, context.Canceled) {
		t.Fatalf("Run: %v, want context.Canceled", r.err)
	}
	for _, ch := range children {
		if got := signalsOf(t, dir, ch.Name); got != "terminated\n" {
			t.Errorf("%s received %q, want one SIGTERM", ch.Name, got)
		}
		if st := r.res.State[ch.Name]; st == nil || !st.Success() {
			t.Errorf("%s ended with %v, want exit 0 on SIGTERM", ch.Name, st)
		}
		if pid := readPID(t, dir, ch.Name); !gone(pid) {
			t.Errorf("%s (pid %d) outlived Run", ch.Name, pid)
		}
	}
}

// Options.Stop passes SIGTERM on to every child once it takes signals
// (it says so through its ready pipe; before, SIGTERM would end a Go
// process outright), and lets them end by themselves: children that
// install their handler 300 ms after they start, asked to stop at once,
// each get one SIGTERM and exit 0, and Run succeeds.
func TestStopWaitsUntilChildrenTakeSignals(t *testing.T) {
	dir := t.TempDir()
	children := []Child{child(dir, "pserver-0", "term", "LAUNCH_TEST_LATE=300ms"), child(dir, "trainer-0", "term", "LAUNCH_TEST_LATE=300ms")}
	stop := make(chan struct{})
	close(stop)
	res, err := Run(context.Background(), children, Options{Stop: stop, Grace: time.Minute})
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	for _, ch := range children {
		if got := signalsOf(t, dir, ch.Name); got != "terminated\n" {
			t.Errorf("%s received %q, want one SIGTERM", ch.Name, got)
		}
		if st := res.State[ch.Name]; st == nil || !st.Success() {
			t.Errorf("%s ended with %v, want exit 0 on SIGTERM", ch.Name, st)
		}
	}
}

// A binary that cannot start is an error naming the child.
func TestStartFailureNamesTheChild(t *testing.T) {
	_, err := Run(context.Background(), []Child{{Name: "pserver-0"}}, Options{Binary: filepath.Join(t.TempDir(), "no-such-binary")})
	if err == nil || !strings.Contains(err.Error(), "starting pserver-0") {
		t.Fatalf("Run: %v, want an error starting pserver-0", err)
	}
}

// A service child (train --serve's replica) runs beside the job: once
// every other child exited 0, JobDone gets their results, the service runs
// on until the context ends, and Run then stops it and returns nil.
func TestServiceOutlivesTheJob(t *testing.T) {
	dir := t.TempDir()
	svc := child(dir, "replica-0", "term")
	svc.Service = true
	children := []Child{child(dir, "pserver-0", "ok"), child(dir, "trainer-0", "ok"), svc}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	jobDone := make(chan *Result, 1)
	ran := make(chan error, 1)
	go func() {
		_, err := Run(ctx, children, Options{Grace: time.Minute, JobDone: func(r *Result) { jobDone <- r }})
		ran <- err
	}()
	var r *Result
	select {
	case r = <-jobDone:
	case err := <-ran:
		t.Fatalf("Run returned %v before the job was done", err)
	}
	if string(r.LastLine("trainer-0")) != `{"role":"trainer-0"}` {
		t.Errorf("JobDone's trainer-0 line %q", r.LastLine("trainer-0"))
	}
	if _, ok := r.State["replica-0"]; ok {
		t.Error("JobDone lists the running service as ended")
	}
	if pid := readPID(t, dir, "replica-0"); gone(pid) {
		t.Fatal("the service is gone once the job is done")
	}
	cancel()
	if err := <-ran; err != nil {
		t.Errorf("Run after the job and a cancel: %v, want nil", err)
	}
	if got := signalsOf(t, dir, "replica-0"); got != "terminated\n" {
		t.Errorf("the service received %q, want one SIGTERM", got)
	}
}
