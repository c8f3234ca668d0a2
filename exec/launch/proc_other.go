//go:build !unix

package launch

import "syscall"

// measured: no child reports its peak memory here (a child gets no
// descriptor beyond stderr on Windows).
const measured = false

// childAttr: no process-group or parent-death settings on this system.
func childAttr() *syscall.SysProcAttr { return nil }

// ownPeakRSS is not measured on this system.
func ownPeakRSS() int64 { return 0 }

// setNice: no priorities here; the child runs at this process's.
func setNice(pid, nice int) error { return nil }
