//go:build unix

package data

import (
	"syscall"
	"time"
)

// processCPU is the processor time the process has used (user and
// system, all its threads): on a shared machine a benchmark's CPU time a
// row moves less with the other load than its wall time.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
