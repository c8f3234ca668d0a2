package launch

import (
	"os"
	"syscall"
)

// childAttr: the kernel kills a child whose parent dies (Pdeathsig), so no
// child outlives `psgraph train`, and each child leads its process group.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
}

// PeakRSS is a finished child's peak resident set in bytes (Linux reports KiB).
func PeakRSS(st *os.ProcessState) int64 {
	if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss * 1024
	}
	return 0
}
