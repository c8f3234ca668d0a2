//go:build unix

package transport

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/psgraph/psgraph/internal/testfix"
)

// The test binary is also BenchmarkPServerCPU's pservers and
// BenchmarkRoundTrip64BProcesses's: with PSGRAPH_PSCPU_CHILD or
// PSGRAPH_RT_CHILD set, TestMain runs one instead of the tests.
func TestMain(m *testing.M) {
	if kind := os.Getenv("PSGRAPH_RT_CHILD"); kind != "" {
		if err := echoChild(kind); err != nil {
			fmt.Fprintln(os.Stderr, "round trip child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if pattern := os.Getenv("PSGRAPH_PSCPU_CHILD"); pattern != "" {
		child := pserverChild
		if os.Getenv("PSGRAPH_PSCPU_RAW") != "" {
			child = rawPServerChild
		}
		if err := child(pattern); err != nil {
			fmt.Fprintln(os.Stderr, "pserver child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// A transfer of a 2x2 sync job's step: a trainer sends up bytes to its
// pserver (a gradient, a table request), which answers down bytes (the
// parameter, the table's rows) once it has both trainers' messages.
type pairSize struct{ up, down int }

// cpuPatterns are the messages of one step between a trainer and each of
// two pservers: the 2x2 digits job (examples/digits-mlp.yaml) and the
// 2x2 DLRM job (examples/dlrm.yaml: 14 dense blocks, and the bundled
// tables' ids, rows and row gradients at their typical sizes). Sizes in
// bytes, as plan.yaml lists them.
var cpuPatterns = map[string][2][]pairSize{
	"digits": {
		{{32768, 32768}},
		{{5120, 5120}, {512, 512}, {40, 40}},
	},
	"dlrm": {
		{{26624, 26624}, {65536, 65536}, {4096, 4096}, {751616, 751616}, {1024, 1024}, {2048, 2048}, {1024, 1024},
			{256, 256}, {64, 64}, {2048, 2048}, {1024, 1024}, {4, 4}, {6 << 10, 96 << 10}, {100 << 10, 0}},
		{{524288, 524288}, {524288, 524288}, {6 << 10, 96 << 10}, {100 << 10, 0}},
	},
}

// BenchmarkPServerCPU runs the message pattern of a 2x2 sync job's step
// with each pserver in a process of its own (this test binary, over a
// Unix socket and with the GOMAXPROCS and GODEBUG `psgraph train` gives
// its children) and the two trainers in this one. A pserver receives every trainer's messages of a step, then
// answers each. It reports the pservers' CPU time (getrusage of each
// pserver process over the timed steps) per message they received: the
// transport's cost per message, where bench/history-2026-12.md's profiles of
// the 2x2 jobs found half a pserver's CPU.
//
// The -raw runs are the floor: the same messages over plain Unix
// sockets, one writev a message and one goroutine reading both trainers'
// connections in turn (rawPServerChild), no framing beyond a length.
func BenchmarkPServerCPU(b *testing.B) {
	for _, name := range []string{"digits", "dlrm"} {
		b.Run(name, func(b *testing.B) { pserverCPU(b, name) })
		b.Run(name+"-raw", func(b *testing.B) { pserverCPURaw(b, name) })
	}
}

// cpuNames are the transfers' names, made once: fmt.Sprintf per message
// would be the benchmark's own cost, in the pservers measured.
func cpuNames(pattern string) (up, down [][]string) {
	for j, ps := range cpuPatterns[pattern] {
		up, down = append(up, nil), append(down, nil)
		for i := range ps {
			up[j] = append(up[j], cpuVar(i, false))
			down[j] = append(down[j], fmt.Sprintf("%s.%d", cpuVar(i, true), j))
		}
	}
	return up, down
}

const cpuWarmup = 20

func cpuVar(i int, down bool) string {
	if down {
		return fmt.Sprintf("p%d", i)
	}
	return fmt.Sprintf("g%d", i)
}

func pserverCPU(b *testing.B, pattern string) {
	pat := cpuPatterns[pattern]
	steps := cpuWarmup + b.N
	addrs, measured := spawnPServers(b, pattern, steps, false)
	ctx := context.Background()
	trainers := make([]*TCP, 2)
	upNames, downNames := cpuNames(pattern)
	for t := range trainers {
		cfg := Config{Self: Trainer(t), Peers: addrs, Token: []byte("s3cret"), JobHash: "pscpu", ConnectTimeout: 30 * time.Second}
		for j, ps := range pat {
			for i, s := range ps {
				if s.down > 0 {
					cfg.Accept = append(cfg.Accept, Spec{Var: downNames[j][i], DType: F32, Bytes: s.down})
				}
			}
		}
		tr, err := Dial(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer tr.Close()
		trainers[t] = tr
	}
	// Each trainer's buffers: what it sends (unchanged until its next
	// Flush) and what it receives.
	step := func(tr *TCP, s int64, up, down [][][]byte) error {
		if err := tr.Flush(ctx); err != nil {
			return err
		}
		for j, ps := range pat {
			for i := range ps {
				if err := tr.Send(ctx, PServer(j), s, upNames[j][i], F32, up[j][i]); err != nil {
					return err
				}
			}
		}
		for j, ps := range pat {
			for i, sz := range ps {
				if sz.down == 0 {
					continue
				}
				if err := tr.Recv(ctx, PServer(j), s, downNames[j][i], down[j][i]); err != nil {
					return err
				}
			}
		}
		return nil
	}
	d := timeTrainers(b, pattern, steps, func(t, s int, up, down [][][]byte) error {
		return step(trainers[t], int64(s), up, down)
	}, func(t int) error { return trainers[t].Flush(ctx) })
	for _, tr := range trainers {
		for j := range pat {
			tr.Done(ctx, PServer(j))
		}
		tr.Flush(ctx)
	}
	cpu, msgs := measured()
	reportCPU(b, cpu, msgs, d)
}

// timeTrainers runs the two trainers' steps of the pattern, each in a
// goroutine with buffers of its own (up, down: pserver, transfer), then
// end; it times the steps after the warm-up and fails b on an error.
func timeTrainers(b *testing.B, pattern string, steps int, step func(t, s int, up, down [][][]byte) error, end func(t int) error) time.Duration {
	pat := cpuPatterns[pattern]
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	started := make(chan struct{}, 2)
	begin := make(chan struct{})
	for t := 0; t < 2; t++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			up, down := make([][][]byte, len(pat)), make([][][]byte, len(pat))
			for j, ps := range pat {
				for _, sz := range ps {
					up[j], down[j] = append(up[j], make([]byte, sz.up)), append(down[j], make([]byte, sz.down))
				}
			}
			for s := 0; s < steps; s++ {
				if s == cpuWarmup {
					started <- struct{}{}
					<-begin
				}
				if err := step(t, s, up, down); err != nil {
					errs <- err
					return
				}
			}
			errs <- end(t)
		}()
	}
	<-started
	<-started
	b.ResetTimer()
	start := time.Now()
	close(begin)
	wg.Wait()
	d := time.Since(start)
	b.StopTimer()
	for t := 0; t < 2; t++ {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	return d
}

func reportCPU(b *testing.B, cpu time.Duration, msgs int64, d time.Duration) {
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(msgs)/1e3, "ps-cpu-us/msg")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/1e3, "ps-cpu-us/step")
	b.ReportMetric(float64(b.N)/d.Seconds(), "steps/s")
}

// spawnPServers starts the pattern's pservers, each a process of its own
// (raw: rawPServerChild), listening on Unix sockets in a temporary
// directory (a short path: a socket's is at most 107 bytes); measured
// waits for them and returns their CPU time and messages received over
// the timed steps.
func spawnPServers(b *testing.B, pattern string, steps int, raw bool) (addrs map[NodeID]string, measured func() (time.Duration, int64)) {
	pat := cpuPatterns[pattern]
	dir, err := os.MkdirTemp("", "psgraph-pscpu-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	addrs = map[NodeID]string{}
	type result struct {
		cpu  time.Duration
		msgs int64
		err  error
	}
	results := make([]chan result, len(pat))
	for j := range pat {
		addr := UnixPrefix + filepath.Join(dir, fmt.Sprintf("ps%d.sock", j))
		addrs[PServer(j)] = addr
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		// As `psgraph train` runs its children (exec/launch: GOMAXPROCS
		// the cores over the job's processes, sysmon kept awake).
		cmd.Env = append(os.Environ(), "PSGRAPH_PSCPU_CHILD="+pattern, "PSGRAPH_PSCPU_INDEX="+strconv.Itoa(j),
			"PSGRAPH_PSCPU_STEPS="+strconv.Itoa(steps), "PSGRAPH_PSCPU_ADDR="+addr,
			fmt.Sprintf("GOMAXPROCS=%d", max(1, runtime.NumCPU()/4)), "GODEBUG=schedtrace=2147483647")
		var lf *os.File
		if raw { // the child's listener, made here: the trainers dial it at once
			l, err := net.Listen("unix", filepath.Join(dir, fmt.Sprintf("ps%d.sock", j)))
			if err != nil {
				b.Fatal(err)
			}
			l.(*net.UnixListener).SetUnlinkOnClose(false)
			if lf, err = l.(*net.UnixListener).File(); err != nil {
				b.Fatal(err)
			}
			l.Close()
			cmd.ExtraFiles = []*os.File{lf}
			cmd.Env = append(cmd.Env, "PSGRAPH_PSCPU_RAW=1")
		}
		out := startChild(b, cmd)
		if lf != nil {
			lf.Close()
		}
		results[j] = make(chan result, 1)
		go func(j int) {
			var r result
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				if f := strings.Fields(sc.Text()); len(f) == 3 && f[0] == "pscpu" {
					ns, _ := strconv.ParseInt(f[1], 10, 64)
					r.cpu = time.Duration(ns)
					r.msgs, _ = strconv.ParseInt(f[2], 10, 64)
				}
			}
			if err := cmd.Wait(); err != nil {
				r.err = fmt.Errorf("pserver %d: %v", j, err)
			}
			results[j] <- r
		}(j)
	}
	return addrs, func() (time.Duration, int64) {
		var cpu time.Duration
		var msgs int64
		for j := range pat {
			r := <-results[j]
			if r.err != nil {
				b.Fatal(r.err)
			}
			cpu += r.cpu
			msgs += r.msgs
		}
		if msgs == 0 {
			b.Fatal("the pservers reported no messages")
		}
		return cpu, msgs
	}
}

// startChild starts cmd, a child of this test binary (TestMain runs it by
// its environment), its stderr this process's, and returns its stdout.
func startChild(b *testing.B, cmd *exec.Cmd) io.ReadCloser {
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	return out
}

// pserverChild is pserver PSGRAPH_PSCPU_INDEX of BenchmarkPServerCPU:
// it serves the pattern's steps to both trainers, then prints its CPU
// time and the messages it received over the steps after the warm-up.
func pserverChild(pattern string) error {
	j, _ := strconv.Atoi(os.Getenv("PSGRAPH_PSCPU_INDEX"))
	steps, _ := strconv.Atoi(os.Getenv("PSGRAPH_PSCPU_STEPS"))
	ps := cpuPatterns[pattern][j]
	upNames, downNames := cpuNames(pattern)
	cfg := Config{Self: PServer(j), Listen: os.Getenv("PSGRAPH_PSCPU_ADDR"), Token: []byte("s3cret"), JobHash: "pscpu",
		Peers: map[NodeID]string{Trainer(0): "", Trainer(1): ""}}
	for i, s := range ps {
		cfg.Accept = append(cfg.Accept, Spec{Var: cpuVar(i, false), DType: F32, Bytes: s.up})
	}
	ctx := context.Background()
	e, err := Listen(ctx, cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	err = serveSteps(pattern, j, steps, "", func(s int) error { return e.Flush(ctx) },
		func(i, t, s int, buf []byte) error { return e.Recv(ctx, Trainer(t), int64(s), upNames[j][i], buf) },
		func(i, t, s int, buf []byte) error {
			return e.Send(ctx, Trainer(t), int64(s), downNames[j][i], F32, buf)
		})
	if err != nil {
		return err
	}
	for t := 0; t < 2; t++ {
		e.WaitDone(ctx, Trainer(t))
	}
	return nil
}

// serveSteps is a pserver child's steps (pserverChild, rawPServerChild):
// each step it receives every trainer's message of each transfer, then
// answers each; after the warm-up it measures (a CPU profile to
// $PSGRAPH_PSCPU_PROFILE.<kind><j> when set) and prints its CPU time and
// the messages it received.
func serveSteps(pattern string, j, steps int, kind string, begin func(s int) error, recv, send func(i, t, s int, buf []byte) error) error {
	ps := cpuPatterns[pattern][j]
	bufs := make([][2][]byte, len(ps))
	reply := make([][]byte, len(ps))
	for i, sz := range ps {
		bufs[i] = [2][]byte{make([]byte, sz.up), make([]byte, sz.up)}
		reply[i] = make([]byte, sz.down)
	}
	var cpu0 time.Duration
	var msgs int64
	for s := 0; s < steps; s++ {
		if s == cpuWarmup {
			cpu0 = testfix.ProcessCPU()
			if f := os.Getenv("PSGRAPH_PSCPU_PROFILE"); f != "" { // a CPU profile of the timed steps
				w, err := os.Create(fmt.Sprintf("%s.%s%d", f, kind, j))
				if err != nil {
					return err
				}
				pprof.StartCPUProfile(w)
				defer w.Close()
				defer pprof.StopCPUProfile()
			}
		}
		if err := begin(s); err != nil {
			return err
		}
		for i := range ps {
			for t := 0; t < 2; t++ {
				if err := recv(i, t, s, bufs[i][t]); err != nil {
					return err
				}
				if s >= cpuWarmup {
					msgs++
				}
			}
		}
		for i, sz := range ps {
			if sz.down == 0 {
				continue
			}
			for t := 0; t < 2; t++ {
				if err := send(i, t, s, reply[i]); err != nil {
					return err
				}
			}
		}
	}
	cpu := testfix.ProcessCPU() - cpu0
	fmt.Printf("pscpu %d %d\n", cpu.Nanoseconds(), msgs)
	return nil
}
