package dyntable

import (
	"runtime"
	"testing"
	"time"
)

// The machine the benchmarks run on may be shared: wall-clock time then
// counts the time other processes held the processor. threadCPU (one file
// per operating system) is the calling thread's processor time, which does
// not; a benchmark locks its goroutine to its thread and reports both.

// cpuClock measures a benchmark's thread time from start to report.
type cpuClock struct{ t0 time.Duration }

func startCPU(b *testing.B) *cpuClock {
	runtime.LockOSThread()
	b.Cleanup(runtime.UnlockOSThread)
	b.ResetTimer()
	return &cpuClock{t0: threadCPU()}
}

func (c *cpuClock) report(b *testing.B, keys int) {
	d := threadCPU() - c.t0
	b.ReportMetric(float64(d.Nanoseconds())/float64(keys), "cpu-ns/key")
	reportPerKey(b, keys)
}
