package dyntable

import (
	"runtime"
	"syscall"
	"testing"
	"time"
	"unsafe"
)

// The machine the benchmarks run on may be shared: wall-clock time then
// counts the time other processes held the processor. threadCPU is the
// calling thread's processor time (Linux CLOCK_THREAD_CPUTIME_ID, to the
// nanosecond), which does not; a benchmark locks its goroutine to its
// thread and reports both.
func threadCPU() time.Duration {
	var ts syscall.Timespec
	if _, _, e := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 3 /* CLOCK_THREAD_CPUTIME_ID */, uintptr(unsafe.Pointer(&ts)), 0); e != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}

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
