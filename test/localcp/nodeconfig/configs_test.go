package nodeconfig

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// TestKubeletConfigPerMode renders the kubelet's configuration for each mode
// and reads back the cgroup settings as the kubelet's YAML decoder would see
// them.
func TestKubeletConfigPerMode(t *testing.T) {
	for _, m := range []Mode{V1, Hybrid, V2} {
		out := Kubelet{ContainerdSocket: "/d/containerd.sock", CgroupRoot: "/configstamp-realnode", Address: "10.213.0.1",
			ClientCA: "/d/ca.crt", SyncFrequency: 10 * time.Second, Cgroups: SettingsFor(m)}.Render()
		var cfg map[string]any
		if err := yaml.UnmarshalStrict([]byte(out), &cfg); err != nil {
			t.Fatalf("%s: %v\n%s", m, err, out)
		}
		want := map[string]any{
			"kind":                     "KubeletConfiguration",
			"cgroupDriver":             "cgroupfs",
			"cgroupRoot":               "/configstamp-realnode",
			"failCgroupV1":             m == V2,
			"containerRuntimeEndpoint": "unix:///d/containerd.sock",
			"syncFrequency":            "10s",
			"address":                  "10.213.0.1",
		}
		for k, v := range want {
			if cfg[k] != v {
				t.Errorf("%s: %s = %v; want %v", m, k, cfg[k], v)
			}
		}
		if ev, _ := cfg["evictionHard"].(map[string]any); ev["memory.available"] != "0%" {
			t.Errorf("%s: evictionHard %v: the %%%% escapes broke", m, cfg["evictionHard"])
		}
	}
	out := Kubelet{Cgroups: SettingsFor(V1)}.Render()
	if strings.Contains(out, "syncFrequency") {
		t.Error("SyncFrequency 0 must leave the kubelet's default")
	}
}

// TestContainerdAgreesWithKubelet: runc's SystemdCgroup in containerd's CRI
// runtime must match the kubelet's cgroupDriver, or pods fail to start
// ("expected cgroupsPath to be of format slice:prefix:name" or the
// reverse), in every mode.
func TestContainerdAgreesWithKubelet(t *testing.T) {
	re := regexp.MustCompile(`(?m)^\s*SystemdCgroup = (true|false)$`)
	for _, m := range []Mode{V1, Hybrid, V2} {
		s := SettingsFor(m)
		out := Containerd{Root: "/r", State: "/s", Socket: "/d/c.sock", SandboxImage: "registry.k8s.io/pause:3.10", Snapshotter: "overlayfs",
			Runc: "/usr/sbin/runc", RuncRoot: "/d/runc", CNIBinDir: "/usr/lib/cni", CNIConfDir: "/d/net.d", Cgroups: s}.Render()
		got := re.FindAllStringSubmatch(out, -1)
		if len(got) != 1 {
			t.Fatalf("%s: %d SystemdCgroup lines in\n%s", m, len(got), out)
		}
		if systemd := got[0][1] == "true"; systemd != (s.CgroupDriver == "systemd") {
			t.Errorf("%s: SystemdCgroup = %s with the kubelet's cgroupDriver %s", m, got[0][1], s.CgroupDriver)
		}
		for _, w := range []string{`root = "/r"`, `address = "/d/c.sock"`, `BinaryName = "/usr/sbin/runc"`, `Root = "/d/runc"`,
			`snapshotter = "overlayfs"`, `conf_dir = "/d/net.d"`, `sandbox_image = "registry.k8s.io/pause:3.10"`} {
			if !strings.Contains(out, w) {
				t.Errorf("%s: no %s in\n%s", m, w, out)
			}
		}
		if strings.Contains(out, "%!") {
			t.Errorf("%s: a formatting error in\n%s", m, out)
		}
	}
}
