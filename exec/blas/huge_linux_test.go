package blas

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/psgraph/psgraph/internal/testfix"
)

// thpOff says why transparent huge pages cannot be asked for here ("" when
// madvise can ask for them).
func thpOff() string {
	b, err := os.ReadFile("/sys/kernel/mm/transparent_hugepage/enabled")
	if err != nil {
		return "no transparent huge pages: " + err.Error()
	}
	if strings.Contains(string(b), "[never]") {
		return "transparent huge pages are off (enabled: [never])"
	}
	return ""
}

// anonHugeKB is the AnonHugePages of the mapping of this process that
// holds address p, in kB.
func anonHugeKB(t testing.TB, p uintptr) int {
	v, err := testfix.MappingField(p, "AnonHugePages")
	if err != nil {
		t.Fatal(err)
	}
	var kb int
	if _, err := fmt.Sscanf(v, "%d kB", &kb); err != nil {
		t.Fatalf("AnonHugePages %q: %v", v, err)
	}
	return kb
}

// mapFresh maps n bytes of fresh anonymous memory, unmapped at the end of
// the test or benchmark.
func mapFresh(t testing.TB, n int) []byte {
	m, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Munmap(m) })
	return m
}

// A large allocation advised before its first write is backed by huge
// pages, and advising a written one keeps its values.
func TestAdviseHuge(t *testing.T) {
	if why := thpOff(); why != "" {
		t.Skip(why)
	}
	const n = 8 << 20
	m := mapFresh(t, n+hugePage)
	p := unsafe.Pointer(unsafe.SliceData(m))
	AdviseHuge(p, uintptr(len(m)))
	for i := 0; i < len(m); i += 4096 {
		m[i] = byte(i >> 12)
	}
	// At least one of the 4 whole 2 MiB pages inside (the kernel may find
	// no free huge page for some, never for all on a machine with free
	// memory).
	lo := (uintptr(p) + hugePage - 1) &^ (hugePage - 1)
	if kb := anonHugeKB(t, lo); kb < 2048 {
		t.Fatalf("AnonHugePages of the advised mapping: %d kB, want at least one 2 MiB page", kb)
	}
	for i := 0; i < len(m); i += 4096 {
		if m[i] != byte(i>>12) {
			t.Fatalf("byte %d is %d after the advice, want %d", i, m[i], byte(i>>12))
		}
	}

	// Advised after the first write: the values stay.
	w := mapFresh(t, n)
	for i := range w {
		w[i] = byte(i * 7)
	}
	AdviseHuge(unsafe.Pointer(unsafe.SliceData(w)), uintptr(len(w)))
	for i := range w {
		if w[i] != byte(i*7) {
			t.Fatalf("byte %d is %d after the advice, want %d", i, w[i], byte(i*7))
		}
	}
}

// BenchmarkFirstTouch is the first write to every 4 KiB of 64 MiB of
// fresh memory, on small pages and advised for huge pages: MB/s, and the
// processor time of the process (user + system, most of it the kernel's
// page faults). Where a virtual machine's memory is backed by its host as
// it is touched, a fresh huge page can cost far more than its 512 small
// pages (docs/performance.md, "Huge pages and first touch").
func BenchmarkFirstTouch(b *testing.B) {
	const n = 64 << 20
	onPages(b, func(b *testing.B, huge bool) {
		var cpu time.Duration
		for range b.N {
			m, err := syscall.Mmap(-1, 0, n+hugePage, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_PRIVATE|syscall.MAP_ANON)
			if err != nil {
				b.Fatal(err)
			}
			if huge {
				AdviseHuge(unsafe.Pointer(unsafe.SliceData(m)), uintptr(len(m)))
			}
			c0 := testfix.ProcessCPU()
			for i := 0; i < len(m); i += 4096 {
				m[i] = 1
			}
			cpu += testfix.ProcessCPU() - c0
			syscall.Munmap(m)
		}
		b.ReportMetric(float64(b.N)*(n+hugePage)/1e6/b.Elapsed().Seconds(), "MB/s")
		b.ReportMetric(float64(cpu.Microseconds())/float64(b.N)/(n+hugePage)*(2<<20), "cpu-us/2MiB")
	})
}

// BenchmarkGatherRows16Pages gathers and scatters batches of 2,617 rows
// (as many as the CTR example's distinct ids a step) at random in two
// 640 MB tables (10M x 16, a table and its optimizer state), written
// before the clock starts, on small pages and on huge pages: ns per row.
// Every batch is new (as in training), so its rows are not in the caches.
func BenchmarkGatherRows16Pages(b *testing.B) {
	const rows, batch = 10000000, 2617
	onPages(b, func(b *testing.B, huge bool) {
		var tabs [2][]float32
		for i := range tabs {
			m := mapFresh(b, rows*64+hugePage)
			p := unsafe.Pointer(unsafe.SliceData(m))
			if huge {
				AdviseHuge(p, uintptr(len(m)))
			} else {
				syscall.Madvise(m, 15) // MADV_NOHUGEPAGE: small pages where THP is always
			}
			tabs[i] = unsafe.Slice((*float32)(p), rows*16)
			for j := range tabs[i] {
				tabs[i][j] = 1
			}
		}
		r := rand.New(rand.NewPCG(1, 2))
		ids := make([]int32, batch)
		v, s := make([]float32, batch*16), make([]float32, batch*16)
		var gather, scatter time.Duration
		for range b.N {
			for i := range ids {
				ids[i] = int32(r.IntN(rows))
			}
			t0 := time.Now()
			GatherRows16(v, tabs[0], ids)
			GatherRows16(s, tabs[1], ids)
			t1 := time.Now()
			ScatterRows16(tabs[0], v, ids)
			ScatterRows16(tabs[1], s, ids)
			scatter += time.Since(t1)
			gather += t1.Sub(t0)
		}
		b.ReportMetric(float64(gather.Nanoseconds())/float64(2*batch*b.N), "gather-ns/row")
		b.ReportMetric(float64(scatter.Nanoseconds())/float64(2*batch*b.N), "scatter-ns/row")
	})
}

// onPages runs a benchmark on small pages and on huge pages (skipped where
// there are none).
func onPages(b *testing.B, run func(b *testing.B, huge bool)) {
	for _, huge := range []bool{false, true} {
		name := map[bool]string{false: "small", true: "huge"}[huge]
		b.Run(name, func(b *testing.B) {
			if why := thpOff(); huge && why != "" {
				b.Skip(why)
			}
			run(b, huge)
		})
	}
}
