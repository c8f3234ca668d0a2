package transport

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/psgraph/psgraph/internal/testfix"
)

// rawPair is a plain Go TCP connection over loopback whose far end reads
// n bytes and answers one byte (a copy), or echoes n bytes back (a
// round trip): the reference the transport benchmarks interleave with
// their own iterations, so that a machine's load weighs on both alike.
type rawPair struct {
	c        net.Conn
	buf, ack []byte
	echo     bool
}

func newRawPair(b *testing.B, n int, echo bool) *rawPair {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, n)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				return
			}
			reply := buf[:1]
			if echo {
				reply = buf
			}
			if _, err := c.Write(reply); err != nil {
				return
			}
		}
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	r := &rawPair{c: c, buf: make([]byte, n), ack: make([]byte, 1), echo: echo}
	if echo {
		r.ack = make([]byte, n)
	}
	return r
}

// once sends n bytes and waits for the answer; it returns how long it took.
func (r *rawPair) once(b *testing.B) time.Duration {
	start := time.Now()
	if _, err := r.c.Write(r.buf); err != nil {
		b.Fatal(err)
	}
	if _, err := io.ReadFull(r.c, r.ack); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}

// BenchmarkTensor64MiB sends a 64 MiB tensor trainer->pserver per op and
// compares with a plain TCP copy of the same bytes, one of each in turn.
func BenchmarkTensor64MiB(b *testing.B) {
	const n = 64 << 20
	m, _ := tcpJob(b, nil, Trainer(0), PServer(0))
	ps, tr := m[PServer(0)], m[Trainer(0)]
	ps.Accept(Spec{Var: "W", DType: F32, Bytes: n})
	src, dst := make([]byte, n), make([]byte, n)
	ctx := context.Background()
	raw := newRawPair(b, n, false)
	// warm up: buffers, windows
	must(b, tr.Send(ctx, PServer(0), -1, "W", F32, src))
	must(b, ps.Recv(ctx, Trainer(0), -1, "W", dst))
	raw.once(b)
	b.SetBytes(n)
	b.ResetTimer()
	var d, rd time.Duration
	for i := 0; i < b.N; i++ {
		start := time.Now()
		must(b, tr.Send(ctx, PServer(0), int64(i), "W", F32, src))
		must(b, ps.Recv(ctx, Trainer(0), int64(i), "W", dst))
		d += time.Since(start)
		b.StopTimer()
		rd += raw.once(b)
		b.StartTimer()
	}
	b.StopTimer()
	rawMBs := float64(n) * float64(b.N) / rd.Seconds() / 1e6
	mbs := float64(n) * float64(b.N) / d.Seconds() / 1e6
	b.ReportMetric(mbs, "MB/s")
	b.ReportMetric(rawMBs, "raw-MB/s")
	b.ReportMetric(mbs/rawMBs, "x-raw")
}

// BenchmarkRoundTrip64B: trainer->pserver->trainer with 64-byte tensors vs
// a raw TCP 64-byte ping-pong, in blocks of 100 of each in turn.
func BenchmarkRoundTrip64B(b *testing.B) {
	m, _ := tcpJob(b, nil, Trainer(0), PServer(0))
	ps, tr := m[PServer(0)], m[Trainer(0)]
	ps.Accept(Spec{Var: "g", DType: F32, Bytes: 64})
	tr.Accept(Spec{Var: "w", DType: F32, Bytes: 64})
	ctx := context.Background()
	src, mid, dst := make([]byte, 64), make([]byte, 64), make([]byte, 64)
	stop := make(chan struct{})
	go func() {
		for i := int64(0); ; i++ {
			if ps.Recv(ctx, Trainer(0), i, "g", mid) != nil {
				return
			}
			ps.Send(ctx, Trainer(0), i, "w", F32, mid)
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	rt := func(i int64) {
		// Not must: its t.Helper walks the stack, a tenth of a round trip.
		if err := tr.Send(ctx, PServer(0), i, "g", F32, src); err != nil {
			b.Fatal(err)
		}
		if err := tr.Recv(ctx, PServer(0), i, "w", dst); err != nil {
			b.Fatal(err)
		}
	}
	raw := newRawPair(b, 64, true)
	for i := int64(0); i < 100; i++ {
		rt(i)
		raw.once(b)
	}
	b.ResetTimer()
	var d, rd time.Duration
	rawN := 0
	for i := 0; i < b.N; {
		start := time.Now()
		k := min(100, b.N-i)
		for j := 0; j < k; j++ {
			rt(int64(100 + i + j))
		}
		d += time.Since(start)
		i += k
		b.StopTimer()
		for j := 0; j < k; j++ {
			rd += raw.once(b)
		}
		rawN += k
		b.StartTimer()
	}
	b.StopTimer()
	close(stop)
	per := d.Seconds() / float64(b.N) * 1e6
	rawPer := rd.Seconds() / float64(rawN) * 1e6
	b.ReportMetric(per, "us/rt")
	b.ReportMetric(rawPer, "raw-us/rt")
	b.ReportMetric(per/rawPer, "x-raw")
}

// BenchmarkStepBurst is the message pattern of a table-heavy step: a
// trainer sends n small messages (each on its transfer) and two large
// ones to a pserver, which receives them all and answers as many; one op
// is one such step. It reports the process's CPU time per message (both
// ends run in this process), the figure the transport's per-message
// overhead shows in.
func BenchmarkStepBurst(b *testing.B) {
	b.Run("small", func(b *testing.B) { stepBurst(b, nil, 64, 4<<10, 4<<10) })
	b.Run("mixed", func(b *testing.B) { stepBurst(b, nil, 64, 4<<10, 512<<10) })
}

// BenchmarkDenseStep is a dense model's step between one trainer and one
// pserver (DLRM's half of a 2x2 job: 1.1 MB of gradients up in 6
// messages, as many parameters down), over loopback TCP and over a Unix
// socket, the transport of `psgraph train` (addr.go). It reports the
// process's CPU time per MB moved (both ends run in this process).
func BenchmarkDenseStep(b *testing.B) {
	b.Run("tcp", func(b *testing.B) { stepBurst(b, nil, 4, 64<<10, 448<<10) })
	b.Run("unix", func(b *testing.B) { stepBurst(b, onUnix(b), 4, 64<<10, 448<<10) })
}

func stepBurst(b *testing.B, tweak func(*Config), n, small, large int) {
	m, _ := tcpJob(b, tweak, Trainer(0), PServer(0))
	ps, tr := m[PServer(0)], m[Trainer(0)]
	names, back := make([]string, n+2), make([]string, n+2) // made once: -benchmem counts the transport's allocations alone
	for i := range names {
		names[i], back[i] = fmt.Sprintf("v%d", i), fmt.Sprintf("v%d@r", i)
		size := small
		if i >= n {
			size = large
		}
		ps.Accept(Spec{Var: names[i], DType: F32, Bytes: size})
		tr.Accept(Spec{Var: back[i], DType: F32, Bytes: size})
	}
	buf := func(i int) []byte {
		if i >= n {
			return make([]byte, large)
		}
		return make([]byte, small)
	}
	src, mid, dst := make([][]byte, n+2), make([][]byte, n+2), make([][]byte, n+2)
	for i := range src {
		src[i], mid[i], dst[i] = buf(i), buf(i), buf(i)
	}
	ctx := context.Background()
	serve := func(step int64) error {
		for i, v := range names {
			if err := ps.Recv(ctx, Trainer(0), step, v, mid[i]); err != nil {
				return err
			}
		}
		for i, v := range back {
			if err := ps.Send(ctx, Trainer(0), step, v, F32, mid[i]); err != nil {
				return err
			}
		}
		return nil
	}
	step := func(s int64) {
		for i, v := range names {
			must(b, tr.Send(ctx, PServer(0), s, v, F32, src[i]))
		}
		for i, v := range back {
			must(b, tr.Recv(ctx, PServer(0), s, v, dst[i]))
		}
	}
	errc := make(chan error, 1)
	total := int64(b.N) + 20
	go func() {
		for s := int64(0); s < total; s++ {
			if err := serve(s); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	for s := int64(0); s < 20; s++ {
		step(s)
	}
	cpu0 := testfix.ProcessCPU()
	b.ResetTimer()
	for s := int64(20); s < total; s++ {
		step(s)
	}
	b.StopTimer()
	cpu := testfix.ProcessCPU() - cpu0
	must(b, <-errc)
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/float64(2*len(names))/1e3, "cpu-us/msg")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N)/(float64(2*(n*small+2*large))/1e6)/1e3, "cpu-us/MB")
}
