//go:build !linux

package localcp

import (
	"context"
	"errors"

	"k8s.io/client-go/kubernetes"
)

var errRealNodeLinux = errors.New("a real node (Options.RealNode) needs Linux")

func checkNodeHost(string) error                              { return errRealNodeLinux }
func (c *ControlPlane) prepareRealNode(context.Context) error { return errRealNodeLinux }
func (c *ControlPlane) startRealNode(context.Context, kubernetes.Interface) error {
	return errRealNodeLinux
}
func (c *ControlPlane) drainRealNode()         {}
func (c *ControlPlane) cleanupRealNode() error { return nil }
