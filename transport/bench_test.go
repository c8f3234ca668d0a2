package transport

import (
	"context"
	"io"
	"net"
	"testing"
	"time"
)

// rawTCP measures a plain Go TCP copy of n bytes over loopback.
func rawTCP(b *testing.B, n int, iters int) time.Duration {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	done := make(chan struct{})
	go func() {
		c, _ := l.Accept()
		buf := make([]byte, n)
		for i := 0; i < iters; i++ {
			io.ReadFull(c, buf)
			c.Write(buf[:1])
		}
		c.Close()
		close(done)
	}()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, n)
	ack := make([]byte, 1)
	start := time.Now()
	for i := 0; i < iters; i++ {
		c.Write(buf)
		io.ReadFull(c, ack)
	}
	d := time.Since(start)
	<-done
	return d
}

// BenchmarkTensor64MiB sends a 64 MiB tensor trainer->pserver per op and
// compares with a plain TCP copy of the same bytes in the same run.
func BenchmarkTensor64MiB(b *testing.B) {
	const n = 64 << 20
	m, _ := tcpJob(b, nil, Trainer(0), PServer(0))
	ps, tr := m[PServer(0)], m[Trainer(0)]
	ps.Accept(Spec{Var: "W", DType: F32, Bytes: n})
	src, dst := make([]byte, n), make([]byte, n)
	ctx := context.Background()
	// warm up: buffers, windows
	must(b, tr.Send(ctx, PServer(0), -1, "W", F32, src))
	must(b, ps.Recv(ctx, Trainer(0), -1, "W", dst))
	raw := rawTCP(b, n, max(b.N, 3))
	b.SetBytes(n)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		must(b, tr.Send(ctx, PServer(0), int64(i), "W", F32, src))
		must(b, ps.Recv(ctx, Trainer(0), int64(i), "W", dst))
	}
	d := time.Since(start)
	b.StopTimer()
	rawMBs := float64(n) * float64(max(b.N, 3)) / raw.Seconds() / 1e6
	mbs := float64(n) * float64(b.N) / d.Seconds() / 1e6
	b.ReportMetric(mbs, "MB/s")
	b.ReportMetric(rawMBs, "raw-MB/s")
	b.ReportMetric(mbs/rawMBs, "x-raw")
}

// BenchmarkRoundTrip64B: trainer->pserver->trainer with 64-byte tensors vs
// a raw TCP 64-byte ping-pong in the same run.
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
		must(b, tr.Send(ctx, PServer(0), i, "g", F32, src))
		must(b, tr.Recv(ctx, PServer(0), i, "w", dst))
	}
	for i := int64(0); i < 100; i++ {
		rt(i)
	}
	iters := max(b.N, 1000)
	raw := rawTCP(b, 64, iters)
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		rt(int64(100 + i))
	}
	d := time.Since(start)
	b.StopTimer()
	close(stop)
	per := d.Seconds() / float64(b.N) * 1e6
	rawPer := raw.Seconds() / float64(iters) * 1e6
	b.ReportMetric(per, "us/rt")
	b.ReportMetric(rawPer, "raw-us/rt")
	b.ReportMetric(per/rawPer, "x-raw")
}
