//go:build linux

package localcp

import (
	"fmt"
	"os"
	"time"
)

// Faults of the real node, for tests of what configstamp must not take for
// a bad config: the node's container runtime or kubelet restarting, the
// kubelet gone (the node NotReady). Each component is killed with SIGKILL,
// as a crash would; containers keep running (their shims outlive
// containerd, and the kubelet's death stops none of them).

// RestartContainerd kills the real node's containerd and starts it again
// with the same flags.
func (c *ControlPlane) RestartContainerd() error { return c.restartNodeComponent(containerdBin) }

// RestartKubelet kills the real node's kubelet and starts it again with the
// same flags.
func (c *ControlPlane) RestartKubelet() error { return c.restartNodeComponent(kubeletBin) }

// StopKubelet kills the real node's kubelet and keeps it stopped until
// StartKubelet: the node stops reporting and turns NotReady after the node
// monitor's grace period.
func (c *ControlPlane) StopKubelet() error {
	if !c.RealNode {
		return errRealNodeOnly
	}
	p, err := c.kill(kubeletBin)
	if err != nil {
		return err
	}
	c.node.stoppedKubelet = p
	return c.writePids()
}

// StartKubelet starts the kubelet StopKubelet stopped.
func (c *ControlPlane) StartKubelet() error {
	p := c.node.stoppedKubelet
	if p == nil {
		return fmt.Errorf("the kubelet was not stopped")
	}
	c.node.stoppedKubelet = nil
	return c.runSupervised(kubeletBin, p.args, p.env)
}

var errRealNodeOnly = fmt.Errorf("only a real node (Options.RealNode) has a container runtime and a kubelet")

func (c *ControlPlane) restartNodeComponent(name string) error {
	if !c.RealNode {
		return errRealNodeOnly
	}
	p, err := c.kill(name)
	if err != nil {
		return err
	}
	return c.runSupervised(name, p.args, p.env)
}

// runSupervised starts name again as the node's service manager would
// (systemd's Restart=on-failure, RestartSec=1): one that exits within its
// first seconds is started again, up to five times. A kubelet restarted
// while its container runtime still initializes (after containerd's own
// restart) exits at once ("server is not initialized yet"), as it does on
// a real node, where systemd starts it again.
func (c *ControlPlane) runSupervised(name string, args, env []string) error {
	const tries, settle = 5, 5 * time.Second
	for try := 1; ; try++ {
		if err := c.run(name, os.O_APPEND, args, env); err != nil {
			return err
		}
		p := c.procs[len(c.procs)-1]
		select {
		case <-time.After(settle):
			return nil
		case <-p.done:
		}
		c.procs = c.procs[:len(c.procs)-1] // exited: not a component that crashed later
		if try == tries {
			return fmt.Errorf("%s exited within %v of its start %d times, the last: %w", name, settle, tries, p.exitErr)
		}
		c.logf("%s exited right after its start (%v); starting it again", name, p.exitErr)
		<-time.After(time.Second)
	}
}
