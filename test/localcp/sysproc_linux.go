package localcp

import "syscall"

// sysProcAttr ties a child to the test process (SIGKILL when the parent dies)
// or, when detached, puts it in its own session so it outlives the parent.
//
// Pdeathsig fires when the OS thread that forked the child exits; the Go
// runtime only ends threads whose goroutine exits while locked to them, which
// exec.Cmd.Start does not do.
func sysProcAttr(detach bool) *syscall.SysProcAttr {
	if detach {
		return &syscall.SysProcAttr{Setsid: true}
	}
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
