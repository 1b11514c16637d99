package localcp

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/configstamp/configstamp/test/localcp/nodeconfig"
)

// A real node (Options.RealNode) runs beside the control plane:
//
//   - a Linux bridge, RealNodeBridge, with the host address RealNodeAPIAddress
//     in the pod range RealNodePodCIDR. The API server listens on that address
//     only (not on 127.0.0.1): pods reach it there, through the `kubernetes`
//     Service (10.96.0.1:443, kube-proxy), and so does the host. Pods get a
//     route to the Service range through the bridge and no default route, so
//     their traffic can only go to the pod range and the Service range.
//   - containerd with its own config, root, state, socket and runc root under
//     Dir/node/containerd; CNI (bridge + host-local, /usr/lib/cni) with its
//     config and IPAM state under Dir/node/cni; pod network namespaces are
//     mounted under containerd's state directory.
//   - kubelet with its own --root-dir (Dir/node/kubelet) and cgroup root
//     (/configstamp-realnode in every cgroup v1 hierarchy, or in the cgroup
//     v2 one), cgroupfs driver on both (see package nodeconfig).
//   - kube-proxy in iptables mode, which adds KUBE-* chains to the host's
//     iptables.
//
// The bridge, the pod range, the cgroup root, the iptables chains and a few
// ports (10250 on the bridge address, 10248/10249/10256 on 127.0.0.1) are
// machine-wide, fixed names, so only one real node runs on a machine at a
// time: Start takes an exclusive lock (realNodeLockPath) and holds it until
// Stop, which removes everything the node made. A Start first removes what a
// crashed run left behind (its directory is recorded in realNodeStatePath).
//
// The kubelet sets a few kernel tunables (vm.overcommit_memory, kernel.panic,
// ...) on start; Start records their values and Stop restores them.
const (
	// RealNodeName is the node that Options.RealNode runs.
	RealNodeName = "real-node-0"
	// RealNodeBridge is the real node's Linux bridge.
	RealNodeBridge = "cstamp0"
	// RealNodeAPIAddress is the bridge's host address, where the API server
	// of a RealNode control plane listens and which it advertises.
	RealNodeAPIAddress = "10.213.0.1"
	// RealNodePodCIDR is the pod address range (bridge + host-local IPAM).
	RealNodePodCIDR = "10.213.0.0/24"

	kubeletBin    = "kubelet"
	kubeProxyBin  = "kube-proxy"
	containerdBin = "containerd" // from the host (apt), not BinDir

	// serviceCIDR is kube-apiserver's --service-cluster-ip-range.
	serviceCIDR = "10.96.0.0/16"
	// criNamespace is the containerd namespace of the CRI plugin.
	criNamespace = "k8s.io"
	// pauseArchive must be in BinDir/images (make node-images): it is the
	// sandbox image and no registry can be reached.
	pauseArchive = "pause.tar"
	pauseImage   = "registry.k8s.io/pause:3.10"
)

// nodeState is what a running real node holds besides its processes.
type nodeState struct {
	// lock is the open realNodeLockPath with an exclusive flock, from
	// prepareRealNode until cleanupRealNode.
	lock *os.File
	// snapshotter is the CRI plugin's: overlayfs, or native where overlayfs
	// cannot be mounted.
	snapshotter string
	// stoppedKubelet: how the kubelet StopKubelet stopped was started.
	stoppedKubelet *process
	// syncFrequency is the kubelet's (Options.KubeletSyncFrequency); 0
	// leaves the kubelet's default.
	syncFrequency time.Duration
	// cgroupMode is the host's (nodeconfig.Detect), set by checkNodeHost.
	cgroupMode nodeconfig.Mode
}

// binaryPath is where component name's executable is: BinDir, K8sBinDir for
// the Kubernetes components, and the host's package for containerd.
func (c *ControlPlane) binaryPath(name string) string {
	if name == containerdBin {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
		return "/usr/bin/containerd"
	}
	if isK8sComponent(name) && c.k8sBinDir != "" {
		return filepath.Join(c.k8sBinDir, name)
	}
	return filepath.Join(c.binDir, name)
}

// inheritedFiles are the extra descriptors a component inherits: a detached
// real node's components inherit the node lock, so it stays held after the
// starting process (hack/localcp up) exits, until they are stopped.
func (c *ControlPlane) inheritedFiles() []*os.File {
	if c.detach && c.node.lock != nil {
		return []*os.File{c.node.lock}
	}
	return nil
}

// nodeDir holds everything of the real node in dir.
func nodeDir(dir string) string { return filepath.Join(dir, "node") }

// hasRealNode reports whether a real node was started in dir.
func hasRealNode(dir string) bool {
	_, err := os.Stat(nodeDir(dir))
	return err == nil
}

func containerdSocket(dir string) string {
	return filepath.Join(nodeDir(dir), "containerd", "containerd.sock")
}

// kubeletRootDir is the kubelet's --root-dir.
func kubeletRootDir(dir string) string { return filepath.Join(nodeDir(dir), "kubelet") }

// ContainerdAddress returns the real node's containerd socket, or "" without
// a real node. Its CRI containers are in namespace "k8s.io".
func (c *ControlPlane) ContainerdAddress() string {
	if !c.RealNode {
		return ""
	}
	return containerdSocket(c.Dir)
}

// Ctr runs the host's `ctr` against the real node's containerd in namespace
// k8s.io and returns its combined output, e.g.
// Ctr(ctx, "tasks", "kill", "-s", "SIGKILL", containerID) to kill a container
// behind the kubelet's back ("tasks ls" lists them with their PIDs).
func (c *ControlPlane) Ctr(ctx context.Context, args ...string) ([]byte, error) {
	if !c.RealNode {
		return nil, fmt.Errorf("ctr %v: the control plane has no real node", args)
	}
	return ctr(ctx, c.Dir, args...)
}

func ctr(ctx context.Context, dir string, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", containerdSocket(dir), "--namespace", criNamespace}, args...)...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ctr %v: %w: %s", args, err, out)
	}
	return out, nil
}

// KubeletRootDir returns the real node's kubelet --root-dir, or "" without a
// real node.
func (c *ControlPlane) KubeletRootDir() string {
	if !c.RealNode {
		return ""
	}
	return kubeletRootDir(c.Dir)
}

// PodVolumeFile returns the host path of file in the volume volumeName of the
// pod with UID podUID on the real node, as the kubelet lays it out:
// <root-dir>/pods/<uid>/volumes/<plugin>/<volume>/<file>. The plugin
// directory is the one that exists (kubernetes.io~configmap,
// kubernetes.io~secret, kubernetes.io~projected, kubernetes.io~empty-dir);
// while none does, the ConfigMap one is returned.
func (c *ControlPlane) PodVolumeFile(podUID, volumeName, file string) string {
	vols := filepath.Join(kubeletRootDir(c.Dir), "pods", podUID, "volumes")
	if m, _ := filepath.Glob(filepath.Join(vols, "*", volumeName)); len(m) == 1 {
		return filepath.Join(m[0], file)
	}
	return filepath.Join(vols, "kubernetes.io~configmap", volumeName, file)
}

// ErrRealNodeUnsupported is returned (wrapped) by Start with
// Options.RealNode, and by CheckRealNodeHost, when the host cannot run the
// real node for a known reason (its cgroups, see package nodeconfig); the
// message says which and what would change it.
var ErrRealNodeUnsupported = nodeconfig.ErrUnsupported

// CheckRealNodeHost is the real node's preflight, what Start with
// Options.RealNode checks before it starts anything: root, the host's
// cgroups (on cgroup v2 it enables the kubelet's controllers at the root, as
// Start would), the host's programs, and the pause image in binDir (default:
// as Options.BinDir). It returns the host's cgroup mode, as a phrase.
func CheckRealNodeHost(binDir string) (string, error) {
	if binDir == "" {
		var err error
		if binDir, err = defaultBinDir(); err != nil {
			return "", err
		}
	}
	mode, err := checkNodeHost(binDir)
	if mode == "" {
		return "", err
	}
	return mode.String(), err
}
