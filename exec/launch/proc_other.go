//go:build !unix

package launch

import (
	"os"
	"syscall"
)

// childAttr: no process-group or parent-death settings on this system.
func childAttr() *syscall.SysProcAttr { return nil }

// PeakRSS is not measured on this system.
func PeakRSS(*os.ProcessState) int64 { return 0 }
