//go:build unix

package testfix

import (
	"syscall"
	"time"
)

// ProcessCPU is the processor time this process has used so far (user
// and system, all its threads): on a shared machine a benchmark's CPU
// time per row, request or message moves less with the other load than
// its wall time.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
