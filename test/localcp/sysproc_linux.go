package localcp

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

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

// pidAlive reports whether pid exists and is not a zombie (a detached
// component's parent may have exited without reaping it).
func pidAlive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state letter follows the ")" that closes the command name.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return true
	}
	return data[i+2] != 'Z' && data[i+2] != 'X'
}

// pidRuns reports whether pid is alive and runs the binary called name, so a
// reused pid in a stale pids file is never signalled.
func pidRuns(pid int, name string) bool {
	if !pidAlive(pid) {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	argv0, _, _ := bytes.Cut(cmdline, []byte{0})
	return filepath.Base(string(argv0)) == name
}
