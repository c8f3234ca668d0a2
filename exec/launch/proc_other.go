//go:build !unix

package launch

import (
	"os"
	"syscall"
)

// childAttr: no process-group or parent-death settings on this system.
func childAttr() *syscall.SysProcAttr { return nil }

// peakRSS is not measured on this system.
func peakRSS(*os.ProcessState) int64 { return 0 }
