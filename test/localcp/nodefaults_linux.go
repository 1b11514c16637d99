//go:build linux

package localcp

import (
	"fmt"
	"os"
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
	return c.run(kubeletBin, os.O_APPEND, p.args, p.env)
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
	return c.run(name, os.O_APPEND, p.args, p.env)
}
