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
	"runtime"
	"strings"
	"testing"
	"time"
)

// BenchmarkRoundTrip64BProcesses is BenchmarkRoundTrip64B as psgraph runs
// a trainer and a pserver: two processes, each with the GOMAXPROCS that
// `psgraph train` gives a job of two processes (exec/launch: the cores
// shared out), the pserver in a child process that echoes every 64-byte
// message, over loopback TCP. Raw TCP is measured the same way (a child
// echoing over a plain socket), in alternating runs of 100 round trips.
// In one process both ends share its threads, and a message handed from
// yamux's receive loop to the waiting recv wakes a second thread; here
// each end has its own process, as in a job.
func BenchmarkRoundTrip64BProcesses(b *testing.B) {
	procs := max(1, runtime.NumCPU()/2)
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
	psAddr := startEcho(b, "psgraph", procs)
	rawAddr := startEcho(b, "raw", procs)
	ctx := context.Background()
	tr, err := Dial(ctx, Config{Self: Trainer(0), Peers: map[NodeID]string{PServer(0): psAddr}, Token: []byte("s3cret"),
		JobHash: "rt", ConnectTimeout: 30 * time.Second, Accept: []Spec{{Var: "w", DType: F32, Bytes: 64}}})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Close()
	raw, err := net.Dial("tcp", rawAddr)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()
	src, dst, rbuf := make([]byte, 64), make([]byte, 64), make([]byte, 64)
	rt := func(i int64) {
		if err := tr.Send(ctx, PServer(0), i, "g", F32, src); err != nil {
			b.Fatal(err)
		}
		if err := tr.Recv(ctx, PServer(0), i, "w", dst); err != nil {
			b.Fatal(err)
		}
	}
	rawRT := func() {
		if _, err := raw.Write(src); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(raw, rbuf); err != nil {
			b.Fatal(err)
		}
	}
	for i := int64(0); i < 100; i++ { // warm up
		rt(i)
		rawRT()
	}
	b.ResetTimer()
	var d, rd time.Duration
	for i := 0; i < b.N; {
		k := min(100, b.N-i)
		start := time.Now()
		for j := 0; j < k; j++ {
			rt(int64(100 + i + j))
		}
		d += time.Since(start)
		b.StopTimer()
		start = time.Now()
		for j := 0; j < k; j++ {
			rawRT()
		}
		rd += time.Since(start)
		b.StartTimer()
		i += k
	}
	b.StopTimer()
	per, rawPer := d.Seconds()/float64(b.N)*1e6, rd.Seconds()/float64(b.N)*1e6
	b.ReportMetric(per, "us/rt")
	b.ReportMetric(rawPer, "raw-us/rt")
	b.ReportMetric(per/rawPer, "x-raw")
	end, cancel := context.WithTimeout(ctx, 10*time.Second) // the child is killed at cleanup anyway
	defer cancel()
	tr.Done(end, PServer(0))
	tr.WaitDone(end, PServer(0))
}

// startEcho starts an echo child of kind (psgraph or raw) with GOMAXPROCS
// procs and returns the address it listens on, which it prints first.
func startEcho(b *testing.B, kind string, procs int) string {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "PSGRAPH_RT_CHILD="+kind, fmt.Sprintf("GOMAXPROCS=%d", procs))
	out := startChild(b, cmd)
	b.Cleanup(func() {
		cmd.Process.Kill() // the raw child echoes until its peer closes; the psgraph one ends at Done
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "addr ")
	if err != nil || !ok {
		b.Fatalf("%s echo child: %q, %v", kind, line, err)
	}
	return addr
}

// echoChild answers every 64-byte message with its bytes: over psgraph's
// transport (a pserver receiving g and sending w at each step) or over a
// plain socket.
func echoChild(kind string) error {
	if kind == "raw" {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		fmt.Printf("addr %s\n", l.Addr())
		c, err := l.Accept()
		if err != nil {
			return err
		}
		defer c.Close()
		buf := make([]byte, 64)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return nil // the benchmark closed
			}
			if _, err := c.Write(buf); err != nil {
				return nil
			}
		}
	}
	ctx := context.Background()
	e, err := Listen(ctx, Config{Self: PServer(0), Listen: "127.0.0.1:0", Peers: map[NodeID]string{Trainer(0): ""},
		Token: []byte("s3cret"), JobHash: "rt", Accept: []Spec{{Var: "g", DType: F32, Bytes: 64}}})
	if err != nil {
		return err
	}
	defer e.Close()
	fmt.Printf("addr %s\n", e.Addr())
	buf := make([]byte, 64)
	for i := int64(0); ; i++ {
		if err := e.Recv(ctx, Trainer(0), i, "g", buf); err != nil {
			e.Done(ctx, Trainer(0))
			return nil // the trainer said Done
		}
		if err := e.Send(ctx, Trainer(0), i, "w", F32, buf); err != nil {
			return err
		}
	}
}
