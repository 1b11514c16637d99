//go:build unix && !linux

package localcp

import "syscall"

// sysProcAttr: without Pdeathsig, children of a crashed test process survive
// on non-Linux systems; Stop still ends them.
func sysProcAttr(detach bool) *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setsid: detach}
}

func pidAlive(pid int) bool { return syscall.Kill(pid, 0) == nil }

func pidRuns(pid int, _ string) bool { return pidAlive(pid) }
