//go:build !linux

package localcp

import (
	"context"
	"errors"

	"k8s.io/client-go/kubernetes"

	"github.com/configstamp/configstamp/test/localcp/nodeconfig"
)

var errRealNodeLinux = errors.New("a real node (Options.RealNode) needs Linux")

func checkNodeHost(string) (nodeconfig.Mode, error)           { return "", errRealNodeLinux }
func (c *ControlPlane) prepareRealNode(context.Context) error { return errRealNodeLinux }
func (c *ControlPlane) startRealNode(context.Context, kubernetes.Interface) error {
	return errRealNodeLinux
}
func (c *ControlPlane) drainRealNode()         {}
func (c *ControlPlane) cleanupRealNode() error { return nil }
