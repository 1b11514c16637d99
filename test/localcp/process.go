package localcp

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is one running component. cmd is nil for processes found by Attach
// (not our children: we can signal them but not wait(2) for them).
type process struct {
	name    string
	pid     int
	args    []string // what it was started with, for Restart
	env     []string
	cmd     *exec.Cmd
	done    chan struct{} // closed once the process has exited
	exitErr error         // valid after done is closed (own children only)
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// exitError reports a component that exited while the control plane needed it.
type exitError struct {
	name, log, tail string
	err             error
}

func (e *exitError) Error() string {
	return fmt.Sprintf("%s exited unexpectedly (%v); last lines of %s:\n%s", e.name, e.err, e.log, e.tail)
}

// portClash reports whether err is a component that lost the race for its port.
func portClash(err error) bool {
	var ee *exitError
	return errors.As(err, &ee) && strings.Contains(ee.tail, "address already in use")
}

// start runs bin/<name> with its output in <Dir>/<name>.log.
func (c *ControlPlane) start(name string, args []string, env ...string) error {
	return c.run(name, os.O_TRUNC, args, env)
}

// run starts bin/<name>; logFlag is O_TRUNC for a first start, O_APPEND for a restart.
func (c *ControlPlane) run(name string, logFlag int, args, env []string) error {
	logPath := c.LogPath(name)
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|logFlag, 0o644)
	if err != nil {
		return err
	}
	defer f.Close() // the child has its own copy of the descriptor
	cmd := exec.Command(c.binaryPath(name), args...)
	cmd.Dir = c.Dir
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = sysProcAttr(c.detach)
	// A detached real node's components inherit its machine-wide lock.
	cmd.ExtraFiles = c.inheritedFiles()
	c.logf("starting %s", name)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", name, err)
	}
	p := &process{name: name, pid: cmd.Process.Pid, args: args, env: env, cmd: cmd, done: make(chan struct{})}
	go func() {
		p.exitErr = cmd.Wait()
		close(p.done)
	}()
	c.procs = append(c.procs, p)
	return c.writePids()
}

// kill ends the running component name with SIGKILL, as a crash would, and
// forgets it (checkAlive no longer reports it). It returns how it was started.
func (c *ControlPlane) kill(name string) (*process, error) {
	for i, p := range c.procs {
		if p.name != name || p.exited() {
			continue
		}
		if err := syscall.Kill(p.pid, syscall.SIGKILL); err != nil {
			return nil, fmt.Errorf("killing %s: %w", name, err)
		}
		<-p.done
		c.procs = append(c.procs[:i], c.procs[i+1:]...)
		return p, nil
	}
	return nil, fmt.Errorf("%s is not running", name)
}

// Pids returns the process ID of every running component by name (etcd,
// kube-apiserver, ...), for measurements such as CPU time from /proc.
func (c *ControlPlane) Pids() map[string]int {
	out := make(map[string]int, len(c.procs))
	for _, p := range c.procs {
		if !p.exited() {
			out[p.name] = p.pid
		}
	}
	return out
}

// checkAlive returns an *exitError for the first component that has exited.
func (c *ControlPlane) checkAlive() error {
	for _, p := range c.procs {
		if p.exited() {
			log := c.LogPath(p.name)
			return &exitError{name: p.name, log: log, tail: tailFile(log, 20), err: p.exitErr}
		}
	}
	return nil
}

// waitFor polls cond every 100ms until it returns nil, a component exits, or
// timeout (or ctx) expires. Each call of cond gets at most 2s, so a port held
// by some other process that accepts but never answers cannot stall it.
func (c *ControlPlane) waitFor(ctx context.Context, what string, timeout time.Duration, cond func(context.Context) error) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		if err := c.checkAlive(); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		callCtx, cancelCall := context.WithTimeout(ctx, 2*time.Second)
		last := cond(callCtx)
		cancelCall()
		if last == nil {
			c.logf("%s after %s", what, time.Since(start).Round(time.Millisecond))
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: gave up after %s (%w): last error: %w",
				what, time.Since(start).Round(time.Millisecond), ctx.Err(), last)
		case <-tick.C:
		}
	}
}

// stopProcs stops the components in reverse start order, each with SIGTERM,
// then SIGKILL if it has not exited after grace. One at a time: stopped all at
// once, etcd's graceful stop waits for the API server's watch streams while
// the API server's shutdown waits for etcd. In order it takes about a second,
// most of it kube-apiserver's own shutdown.
func (c *ControlPlane) stopProcs(grace time.Duration) error {
	var stuck []string
	for i := len(c.procs) - 1; i >= 0; i-- {
		p := c.procs[i]
		if p.exited() {
			continue
		}
		_ = syscall.Kill(p.pid, syscall.SIGTERM)
		select {
		case <-p.done:
			continue
		case <-time.After(grace):
		}
		c.logf("%s did not exit %s after SIGTERM, sending SIGKILL", p.name, grace)
		_ = syscall.Kill(p.pid, syscall.SIGKILL)
		select {
		case <-p.done:
		case <-time.After(5 * time.Second):
			stuck = append(stuck, fmt.Sprintf("%s (pid %d)", p.name, p.pid))
		}
	}
	c.procs = nil
	if len(stuck) > 0 {
		return fmt.Errorf("processes still running after SIGKILL: %s", strings.Join(stuck, ", "))
	}
	return nil
}

// watchPid closes p.done once a process that is not our child has gone.
func watchPid(p *process) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for range tick.C {
		if !pidAlive(p.pid) {
			close(p.done)
			return
		}
	}
}

const pidsFile = "pids"

// writePids records "<component> <pid>" lines in <Dir>/pids so that another
// process (hack/localcp down) can find and stop a detached control plane.
func (c *ControlPlane) writePids() error {
	var b strings.Builder
	for _, p := range c.procs {
		fmt.Fprintf(&b, "%s %d\n", p.name, p.pid)
	}
	path := filepath.Join(c.Dir, pidsFile)
	if err := os.WriteFile(path+".tmp", []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// readPids parses <dir>/pids in start order.
func readPids(dir string) ([][2]string, error) {
	data, err := os.ReadFile(filepath.Join(dir, pidsFile))
	if err != nil {
		return nil, err
	}
	var out [][2]string
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if f := strings.Fields(line); len(f) == 2 {
			out = append(out, [2]string{f[0], f[1]})
		}
	}
	return out, nil
}

// attachProcs returns the processes listed in dir/pids that are still alive
// and still run the recorded binary (pids may have been reused), and whether
// all listed processes are.
func attachProcs(dir string) ([]*process, bool, error) {
	entries, err := readPids(dir)
	if err != nil {
		return nil, false, err
	}
	var procs []*process
	for _, e := range entries {
		pid, err := strconv.Atoi(e[1])
		if err != nil || !pidRuns(pid, e[0]) {
			continue
		}
		p := &process{name: e[0], pid: pid, done: make(chan struct{})}
		go watchPid(p)
		procs = append(procs, p)
	}
	return procs, len(procs) == len(entries) && len(procs) > 0, nil
}

// freePorts returns n distinct free TCP ports on 127.0.0.1. They are only
// free until someone else binds them; Start retries on "address already in use".
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close() // keep all open until the end so the ports are distinct
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// tailFile returns the last n lines of a file.
func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(cannot read log: %v)", err)
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 64*1024), 1024*1024)
	for s.Scan() {
		lines = append(lines, s.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return "    " + strings.Join(lines, "\n    ")
}
