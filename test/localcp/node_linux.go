//go:build linux

package localcp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/configstamp/configstamp/test/localcp/nodeconfig"
)

const (
	// cniBinDir is where Debian's containernetworking-plugins installs.
	cniBinDir = "/usr/lib/cni"
	// cniNetwork names our CNI network; libcni caches results under
	// /var/lib/cni/results/<network>-<container>-<ifname>.
	cniNetwork = "configstamp-realnode"
	// nodeCgroupRoot is the kubelet's cgroupRoot: its kubepods hierarchy and
	// every pod's cgroups are created under it, in each cgroup v1 hierarchy
	// or in the cgroup v2 one (nodeconfig).
	nodeCgroupRoot = "/configstamp-realnode"
	// unixPathMax is sun_path's size; containerd adds ".ttrpc" to its socket.
	unixPathMax = 108
)

// checkNodeHost reports the host programs a real node needs and that are
// missing, and whether the process may set it up at all: root, and the
// host's cgroups (nodeconfig.CheckHost: on cgroup v2 that enables the
// kubelet's controllers at the root). It returns the host's cgroup mode.
func checkNodeHost(binDir string) (nodeconfig.Mode, error) {
	if os.Geteuid() != 0 {
		return "", errors.New("a real node (Options.RealNode) needs root")
	}
	mode, err := nodeconfig.CheckHost(nodeCgroupRoot)
	if err != nil {
		return mode, err
	}
	var missing []string
	for _, prog := range []string{containerdBin, "containerd-shim-runc-v2", "runc", "ctr", "iptables", "ip"} {
		if _, err := exec.LookPath(prog); err != nil {
			missing = append(missing, prog)
		}
	}
	for _, plugin := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniBinDir, plugin)); err != nil {
			missing = append(missing, filepath.Join(cniBinDir, plugin))
		}
	}
	if len(missing) > 0 {
		return mode, fmt.Errorf(`%w: %s not installed; run "make realnode" (installs containerd, runc, containernetworking-plugins, iptables and conntrack with apt-get)`,
			ErrBinariesMissing, strings.Join(missing, ", "))
	}
	if _, err := os.Stat(filepath.Join(binDir, "images", pauseArchive)); err != nil {
		return mode, fmt.Errorf(`%w: %s (the pod sandbox image %s; no registry is reachable); run "make node-images"`,
			ErrBinariesMissing, filepath.Join(binDir, "images", pauseArchive), pauseImage)
	}
	return mode, nil
}

// prepareRealNode takes the machine's real-node lock, removes what an earlier
// real node left behind, records this one and creates the bridge. It runs
// before the API server, which binds to the bridge's address. Once it holds
// the lock it sets c.RealNode, so that Stop cleans up and releases it, even
// if it fails later.
func (c *ControlPlane) prepareRealNode(ctx context.Context) error {
	if sock := containerdSocket(c.Dir); len(sock)+len(".ttrpc") >= unixPathMax {
		return fmt.Errorf("state directory %s is too long for containerd's socket %s (max %d bytes)", c.Dir, sock, unixPathMax)
	}
	lock, err := lockRealNode(ctx, c.logf)
	if err != nil {
		return err
	}
	c.node.lock = lock
	c.RealNode = true
	prev, err := readNodeRecord()
	if err != nil {
		return err
	}
	if prev.Dir != "" && prev.Dir != c.Dir {
		c.logf("removing the leftovers of the real node in %s", prev.Dir)
		// Its processes too: a detached one may still run, unhealthy.
		if err := stopListed(prev.Dir); err != nil {
			return fmt.Errorf("stopping the previous real node in %s: %w", prev.Dir, err)
		}
	}
	// Always, even without a record: the names are fixed, so anything found
	// under them is a leftover.
	if err := cleanupNode(prev.Dir, c.binDir, prev.Sysctls, c.logf); err != nil {
		return fmt.Errorf("removing the previous real node's leftovers: %w", err)
	}
	if prev.OwnsDir && prev.Dir != c.Dir {
		// A crashed test's temporary directory; nothing is mounted there now.
		if err := os.RemoveAll(prev.Dir); err != nil {
			return err
		}
	}
	// A reused Dir: StopDir has run, but its node may have lost the record.
	if err := unmountUnder(c.Dir); err != nil {
		return err
	}
	if err := os.RemoveAll(nodeDir(c.Dir)); err != nil {
		return err
	}
	sysctls, err := readSysctls()
	if err != nil {
		return err
	}
	if err := writeNodeRecord(nodeRecord{Dir: c.Dir, OwnsDir: c.ownsDir, Sysctls: sysctls}); err != nil {
		return err
	}
	if err := os.MkdirAll(nodeDir(c.Dir), 0o755); err != nil {
		return err
	}
	return setupBridge()
}

// setupBridge creates the bridge with the host address. Pods' veths are
// added to it by the CNI bridge plugin.
func setupBridge() error {
	for _, args := range [][]string{
		{"link", "add", RealNodeBridge, "type", "bridge"},
		{"addr", "add", RealNodeAPIAddress + "/24", "dev", RealNodeBridge},
		{"link", "set", RealNodeBridge, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// startRealNode starts containerd, imports the node images, and starts the
// kubelet and kube-proxy. The caller waits for the node to be Ready.
func (c *ControlPlane) startRealNode(ctx context.Context, cs kubernetes.Interface) error {
	if err := c.startContainerd(ctx); err != nil {
		return err
	}
	if err := c.importImages(ctx); err != nil {
		return err
	}
	if err := c.startKubelet(); err != nil {
		return err
	}
	// kube-proxy reads its node's addresses; it would fall back to 127.0.0.1
	// (with a warning) if the node has not registered yet.
	if err := c.waitFor(ctx, "node "+RealNodeName+" registered", time.Minute, func(ctx context.Context) error {
		_, err := cs.CoreV1().Nodes().Get(ctx, RealNodeName, metav1.GetOptions{})
		return err
	}); err != nil {
		return err
	}
	return c.startKubeProxy()
}

// cniConfig: a bridge on RealNodeBridge (made beforehand, with the host
// address, so the plugin neither assigns it nor enables IP forwarding as
// isGateway would), no masquerading, and host-local IPAM that stores its
// leases in our directory. Pods get a route to the Service range through
// the host and no default route: they can reach the pod range, the Service
// range (kube-proxy's DNAT; the API server) and nothing else.
const cniConfig = `{
  "cniVersion": "0.4.0",
  "name": %[1]q,
  "plugins": [
    {
      "type": "bridge",
      "bridge": %[2]q,
      "isGateway": false,
      "isDefaultGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{"subnet": %[3]q, "gateway": %[4]q}]],
        "routes": [{"dst": %[5]q, "gw": %[4]q}],
        "dataDir": %[6]q
      }
    }
  ]
}
`

func (c *ControlPlane) startContainerd(ctx context.Context) error {
	base := filepath.Join(nodeDir(c.Dir), "containerd")
	cniConf := filepath.Join(nodeDir(c.Dir), "cni", "net.d")
	for _, d := range []string{base, cniConf} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	runc, err := exec.LookPath("runc")
	if err != nil {
		return fmt.Errorf("%w: runc", ErrBinariesMissing)
	}
	cni := fmt.Sprintf(cniConfig, cniNetwork, RealNodeBridge, RealNodePodCIDR, RealNodeAPIAddress, serviceCIDR,
		filepath.Join(nodeDir(c.Dir), "cni", "ipam"))
	if err := os.WriteFile(filepath.Join(cniConf, "10-configstamp.conflist"), []byte(cni), 0o644); err != nil {
		return err
	}
	snapshotter := "overlayfs"
	c.node.snapshotter = snapshotter
	if err := probeOverlay(filepath.Join(base, "overlay-probe")); err != nil {
		c.logf("overlayfs unusable under %s (%v): containerd uses the native snapshotter", base, err)
		snapshotter = "native"
		c.node.snapshotter = snapshotter
	}
	cfg := nodeconfig.Containerd{Root: filepath.Join(base, "root"), State: filepath.Join(base, "state"), Socket: containerdSocket(c.Dir),
		SandboxImage: pauseImage, Snapshotter: snapshotter, Runc: runc, RuncRoot: filepath.Join(base, "runc"),
		CNIBinDir: cniBinDir, CNIConfDir: cniConf, Cgroups: nodeconfig.SettingsFor(c.node.cgroupMode)}.Render()
	cfgPath := filepath.Join(base, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	if err := c.start(containerdBin, []string{"--config=" + cfgPath, "--log-level=warn"}); err != nil {
		return err
	}
	return c.waitFor(ctx, "containerd", 30*time.Second, func(ctx context.Context) error {
		_, err := ctr(ctx, c.Dir, "version")
		return err
	})
}

// probeOverlay mounts an overlay in dir and unmounts it again.
func probeOverlay(dir string) error {
	defer func() { _ = os.RemoveAll(dir) }()
	var p [4]string
	for i, n := range []string{"lower", "upper", "work", "merged"} {
		p[i] = filepath.Join(dir, n)
		if err := os.MkdirAll(p[i], 0o755); err != nil {
			return err
		}
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", p[0], p[1], p[2])
	if err := syscall.Mount("overlay", p[3], "overlay", 0, opts); err != nil {
		return err
	}
	return syscall.Unmount(p[3], syscall.MNT_DETACH)
}

// importImages imports every BinDir/images/*.tar into the node's containerd,
// where the CRI plugin finds them (pods must use imagePullPolicy Never or
// IfNotPresent: no registry is reachable).
func (c *ControlPlane) importImages(ctx context.Context) error {
	archives, err := filepath.Glob(filepath.Join(c.binDir, "images", "*.tar"))
	if err != nil {
		return err
	}
	sort.Strings(archives)
	began := time.Now()
	for _, a := range archives {
		// Unpacked for the CRI plugin's snapshotter, as a pull would be.
		if _, err := ctr(ctx, c.Dir, "images", "import", "--snapshotter", c.node.snapshotter, a); err != nil {
			return fmt.Errorf("importing image archive %s: %w", a, err)
		}
	}
	out, err := ctr(ctx, c.Dir, "images", "ls", "-q")
	if err != nil {
		return err
	}
	if !strings.Contains(string(out), pauseImage) {
		return fmt.Errorf("%s holds no %s (images: %s)", filepath.Join(c.binDir, "images", pauseArchive), pauseImage, strings.Fields(string(out)))
	}
	c.logf("imported %d image archives in %s", len(archives), time.Since(began).Round(time.Millisecond))
	return nil
}

func (c *ControlPlane) startKubelet() error {
	dir := nodeDir(c.Dir)
	root := kubeletRootDir(c.Dir)
	if err := os.MkdirAll(root, 0o750); err != nil {
		return err
	}
	if err := makeCgroupRoot(c.node.cgroupMode); err != nil {
		return err
	}
	kubeconfig := filepath.Join(dir, "kubelet.kubeconfig")
	if err := writeClientKubeconfig(kubeconfig, c.APIServerURL, c.pki.caCert, c.pki.nodeCert, c.pki.nodeKey); err != nil {
		return err
	}
	cfg := filepath.Join(dir, "kubelet.yaml")
	data := nodeconfig.Kubelet{ContainerdSocket: containerdSocket(c.Dir), CgroupRoot: nodeCgroupRoot, Address: RealNodeAPIAddress,
		ClientCA: c.pki.caCert, SyncFrequency: c.node.syncFrequency, Cgroups: nodeconfig.SettingsFor(c.node.cgroupMode)}.Render()
	if err := os.WriteFile(cfg, []byte(data), 0o644); err != nil {
		return err
	}
	return c.start(kubeletBin, []string{
		"--config=" + cfg,
		"--kubeconfig=" + kubeconfig,
		"--root-dir=" + root,
		"--cert-dir=" + filepath.Join(dir, "kubelet-pki"),
		"--hostname-override=" + RealNodeName,
		"--node-ip=" + RealNodeAPIAddress,
		"--v=1",
	})
}

// kubeProxyConfig: iptables mode that changes no sysctl (conntrack sizes and
// timeouts at 0 keep the kernel's; no localhost NodePorts, which would set
// route_localnet), NodePorts only on the bridge address, listeners on
// loopback, and pods' own range so traffic from pods is not masqueraded.
const kubeProxyConfig = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection:
  kubeconfig: %[1]s
hostnameOverride: %[2]s
bindAddress: %[3]s
mode: iptables
clusterCIDR: %[4]s
detectLocalMode: ClusterCIDR
nodePortAddresses: ["%[3]s/32"]
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
oomScoreAdj: 0
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
iptables:
  localhostNodePorts: false
  masqueradeAll: false
  syncPeriod: 30s
  minSyncPeriod: 0s
`

func (c *ControlPlane) startKubeProxy() error {
	cfg := filepath.Join(nodeDir(c.Dir), "kube-proxy.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf(kubeProxyConfig, c.KubeconfigPath, RealNodeName, RealNodeAPIAddress, RealNodePodCIDR)), 0o644); err != nil {
		return err
	}
	return c.start(kubeProxyBin, []string{"--config=" + cfg, "--v=1"})
}

// cgroupHierarchies returns the directories of the cgroup hierarchies the
// kubelet uses: /sys/fs/cgroup on cgroup v2, each mounted hierarchy on v1.
func cgroupHierarchies() []string {
	mode, err := nodeconfig.Detect()
	if err == nil && mode.Unified() {
		return []string{nodeconfig.Mountpoint}
	}
	dirs, _ := filepath.Glob(filepath.Join(nodeconfig.Mountpoint, "*"))
	var out []string
	for _, d := range dirs {
		if fi, err := os.Lstat(d); err == nil && fi.IsDir() { // cpu,cpuacct symlinks are duplicates
			out = append(out, d)
		}
	}
	return out
}

// makeCgroupRoot creates the kubelet's cgroup root: the kubelet refuses a
// cgroupRoot that does not exist. On cgroup v2 it first enables the
// kubelet's controllers at the root (nodeconfig.PrepareV2); on v1 it makes
// the root in every hierarchy.
func makeCgroupRoot(mode nodeconfig.Mode) error {
	if mode.Unified() {
		return nodeconfig.PrepareV2(nodeconfig.OSFS{}, nodeconfig.Mountpoint, nodeCgroupRoot, true)
	}
	for _, h := range cgroupHierarchies() {
		d := filepath.Join(h, nodeCgroupRoot)
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("creating cgroup %s: %w", d, err)
		}
		// A v1 cpuset cgroup takes no task until it has CPUs and memory nodes.
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if v, err := os.ReadFile(filepath.Join(h, f)); err == nil {
				if err := os.WriteFile(filepath.Join(d, f), v, 0o644); err != nil {
					return fmt.Errorf("initialising %s: %w", filepath.Join(d, f), err)
				}
			}
		}
	}
	return nil
}
