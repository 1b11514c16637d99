package nodeconfig

import (
	"fmt"
	"time"
)

// containerdConfig keeps containerd apart from any system one: its own root,
// state, sockets and runc root, no debug or metrics listener, and the CRI
// plugin's CNI config in our directory.
const containerdConfig = `version = 2
root = %[1]q
state = %[2]q
# containerd keeps its own OOM score; lowering it needs CAP_SYS_RESOURCE.
oom_score = 0
# /opt/containerd would be created by the "opt" plugin; the other snapshotters
# probe the host.
disabled_plugins = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = %[3]q

[debug]
  address = ""

[metrics]
  address = ""

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[4]q
  # The machine lacks CAP_SYS_RESOURCE, so runc cannot give a container an
  # OOM score below its own (the sandbox asks for -998): every sandbox would
  # fail with "can't get final child's PID from pipe: EOF". This clamps it.
  restrict_oom_score_adj = true
  # Pod network namespaces under our state directory, not /run/netns.
  netns_mounts_under_state_dir = true
  disable_apparmor = true
  # kubectl exec/logs streams: loopback and a free port.
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_tls_streaming = false
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = %[5]q
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = %[6]q
        Root = %[7]q
        # The kubelet's cgroupDriver is cgroupfs (Settings): runc manages
        # cgroups itself, on cgroup v1 and v2 alike.
        SystemdCgroup = %[10]t
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %[8]q
    conf_dir = %[9]q
    max_conf_num = 1
`

// Containerd is the real node's containerd configuration.
type Containerd struct {
	Root, State, Socket string
	// SandboxImage is the CRI plugin's pause image.
	SandboxImage string
	// Snapshotter is overlayfs, or native where overlayfs cannot be mounted.
	Snapshotter string
	// Runc is runc's path, RuncRoot its --root.
	Runc, RuncRoot string
	// CNIBinDir and CNIConfDir are the CRI plugin's CNI plugins and config.
	CNIBinDir, CNIConfDir string
	Cgroups               Settings
}

// Render returns config.toml.
func (p Containerd) Render() string {
	return fmt.Sprintf(containerdConfig, p.Root, p.State, p.Socket, p.SandboxImage, p.Snapshotter, p.Runc, p.RuncRoot,
		p.CNIBinDir, p.CNIConfDir, p.Cgroups.SystemdCgroup)
}

// kubeletConfig: the settings that let a kubelet run on a shared test
// machine beside others: cgroupfs on cgroup v1 and v2 (Settings), swap tolerated, no eviction
// or image GC on a shared disk, no local storage accounting, no static pods,
// listeners on the bridge address or loopback only, and no attempt to lower
// its own OOM score (no CAP_SYS_RESOURCE).
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
containerRuntimeEndpoint: unix://%[1]s
cgroupDriver: %[5]s
cgroupRoot: %[2]s
failCgroupV1: %[6]t
failSwapOn: false
localStorageCapacityIsolation: false
evictionHard:
  memory.available: "0%%"
  nodefs.available: "0%%"
  nodefs.inodesFree: "0%%"
  imagefs.available: "0%%"
  imagefs.inodesFree: "0%%"
evictionPressureTransitionPeriod: 0s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
staticPodPath: ""
address: %[3]s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
oomScoreAdj: 0
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: true
  x509:
    clientCAFile: %[4]s
authorization:
  mode: Webhook
kubeAPIQPS: 50
kubeAPIBurst: 100
serializeImagePulls: false
`

// Kubelet is the real node's kubelet configuration.
type Kubelet struct {
	// ContainerdSocket is the CRI endpoint's socket path.
	ContainerdSocket string
	// CgroupRoot is the kubelet's cgroupRoot, e.g. /configstamp-realnode.
	CgroupRoot string
	// Address is where the kubelet serves (port 10250).
	Address string
	// ClientCA verifies the API server's client certificate.
	ClientCA string
	// SyncFrequency is the kubelet's syncFrequency; 0 keeps its default (1m).
	SyncFrequency time.Duration
	Cgroups       Settings
}

// Render returns the KubeletConfiguration YAML.
func (p Kubelet) Render() string {
	s := fmt.Sprintf(kubeletConfig, p.ContainerdSocket, p.CgroupRoot, p.Address, p.ClientCA, p.Cgroups.CgroupDriver, p.Cgroups.FailCgroupV1)
	if p.SyncFrequency > 0 {
		s += fmt.Sprintf("syncFrequency: %s\n", p.SyncFrequency)
	}
	return s
}
