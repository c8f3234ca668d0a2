//go:build unix

package launch

import "golang.org/x/sys/unix"

// setNice sets process pid's nice value (a started child's).
func setNice(pid, nice int) error {
	return unix.Setpriority(unix.PRIO_PROCESS, pid, nice)
}
