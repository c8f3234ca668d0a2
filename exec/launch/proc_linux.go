package launch

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// measured: a child reports its own peak memory (ownPeakRSS).
const measured = true

// childAttr: the kernel kills a child whose parent dies (Pdeathsig), so no
// child outlives `psgraph train`, and each child leads its process group.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}

// ownPeakRSS is this process's peak resident set in bytes: VmHWM of
// /proc/self/status, the high-water mark of this image's address space
// (getrusage's maxrss would include the parent's size at exec), or 0.
func ownPeakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	return vmHWM(string(b))
}

// vmHWM reads VmHWM (KiB) from the text of a /proc/PID/status, in bytes;
// 0 when it has none.
func vmHWM(status string) int64 {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			kib, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			if err != nil {
				return 0
			}
			return kib << 10
		}
	}
	return 0
}
