//go:build unix && !linux

package launch

import "syscall"

// measured: a child reports its own peak memory (ownPeakRSS).
const measured = true

// childAttr: without Linux's Pdeathsig, a child outlives a parent killed
// by SIGKILL; Run still stops every child when it returns normally or on a
// signal it can catch.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// ownPeakRSS is this process's peak resident set in bytes, as getrusage
// gives it (the BSDs and macOS report bytes).
func ownPeakRSS() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return int64(ru.Maxrss)
}
