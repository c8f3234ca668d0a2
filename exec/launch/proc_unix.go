//go:build unix && !linux

package launch

import (
	"os"
	"syscall"
)

// childAttr: without Linux's Pdeathsig, a child outlives a parent killed
// by SIGKILL; Run still stops every child when it returns normally or on a
// signal it can catch.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// PeakRSS is a finished child's peak resident set in bytes (the BSDs and
// macOS report bytes).
func PeakRSS(st *os.ProcessState) int64 {
	if ru, ok := st.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss
	}
	return 0
}
