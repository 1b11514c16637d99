//go:build linux

package localcp_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/configstamp/configstamp/test/localcp"
	"github.com/configstamp/configstamp/test/localcp/nodeconfig"
)

// TestRealNodeRunsAPod starts a control plane with a real node, runs a pod
// that mounts a ConfigMap, checks the file on the host and that the pod's
// network reaches the API server through the `kubernetes` Service, then checks
// that Stop leaves nothing behind.
func TestRealNodeRunsAPod(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a real node needs root")
	}
	// Start waits for the machine's real-node lock while other packages'
	// tests run their real node (go test ./... runs packages in parallel).
	startCtx, cancelStart := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancelStart()
	before := hostState(t)
	began := time.Now()
	cp, err := localcp.Start(startCtx, localcp.Options{RealNode: true, Logf: t.Logf})
	if err != nil { // missing binaries or images fail too: the error says which make target to run
		t.Fatal(err)
	}
	t.Logf("control plane with real node Ready in %s", time.Since(began).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	stopped := false
	defer func() {
		if t.Failed() {
			for _, c := range []string{"kube-apiserver", "containerd", "kubelet", "kube-proxy"} {
				t.Logf("--- last lines of %s ---\n%s", cp.LogPath(c), cp.Tail(c, 40))
			}
		}
		if !stopped {
			if err := cp.Stop(); err != nil {
				t.Error(err)
			}
		}
	}()

	cfg, err := cp.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(cfg)
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "settings", Namespace: "default"},
		Data:       map[string]string{"greeting": "hello from configstamp"},
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The test app serves what it read from the ConfigMap; without its image
	// (make node-images) the pause image, which the node always has, stands in.
	container := corev1.Container{
		Name:            "app",
		Image:           "registry.k8s.io/pause:3.10",
		ImagePullPolicy: corev1.PullNever, // no registry is reachable
		VolumeMounts:    []corev1.VolumeMount{{Name: "settings", MountPath: "/settings"}},
	}
	testApp := haveTestApp()
	if testApp {
		container.Image = "configstamp.test/testapp:dev"
		container.Env = []corev1.EnvVar{{Name: "APP_DIRS", Value: "/settings"}}
		container.ReadinessProbe = &corev1.Probe{
			ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(8080)}},
			PeriodSeconds: 1,
		}
	} else {
		t.Log("no test app image (make node-images): running pause, skipping the check of what the container read")
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "default"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{container},
			Volumes: []corev1.Volume{{Name: "settings", VolumeSource: corev1.VolumeSource{
				ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "settings"}},
			}}},
			TerminationGracePeriodSeconds: ptr.To[int64](1),
		},
	}
	created := time.Now()
	if pod, err = cs.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "app", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = fmt.Sprintf("on %q phase %s ready %v IP %s %+v", p.Spec.NodeName, p.Status.Phase, podReady(p), p.Status.PodIP, p.Status.ContainerStatuses)
		pod = p
		return p.Spec.NodeName == localcp.RealNodeName && p.Status.Phase == corev1.PodRunning && podReady(p), nil
	})
	if err != nil {
		t.Fatalf("pod did not become Ready: %v (last: %s)", err, last)
	}
	t.Logf("pod Running and Ready %s after creation, IP %s", time.Since(created).Round(time.Millisecond), pod.Status.PodIP)
	if _, podNet, _ := net.ParseCIDR(localcp.RealNodePodCIDR); !podNet.Contains(net.ParseIP(pod.Status.PodIP)) {
		t.Errorf("pod IP %s not in %s", pod.Status.PodIP, localcp.RealNodePodCIDR)
	}

	file := cp.PodVolumeFile(string(pod.UID), "settings", "greeting")
	if data, err := os.ReadFile(file); err != nil || string(data) != cm.Data["greeting"] {
		t.Errorf("ConfigMap file on the host %s: %q, %v; want %q", file, data, err, cm.Data["greeting"])
	}

	// Host -> pod, the way the API server calls webhooks (aggregator routing).
	if testApp {
		body, err := httpGet(ctx, "http://"+net.JoinHostPort(pod.Status.PodIP, "8080")+"/config")
		if err != nil || !strings.Contains(body, cm.Data["greeting"]) {
			t.Errorf("the test app's /config from the host: %q, %v; want the ConfigMap's %q", body, err, cm.Data["greeting"])
		} else {
			t.Logf("host -> pod: the test app read %s", strings.TrimSpace(body))
		}
	}

	// From the pod's network namespace: 10.96.0.1:443 -> kube-proxy's DNAT ->
	// the API server on the bridge address.
	pid := podPid(ctx, t, cp)
	body, err := getInNetns(ctx, cfg, pid, "https://10.96.0.1/readyz")
	if err != nil {
		t.Errorf("API server through the kubernetes Service from the pod's network: %v", err)
	} else {
		t.Logf("pod network -> https://10.96.0.1/readyz: %q", body)
	}

	dir := cp.Dir
	stopped = true
	stopBegan := time.Now()
	if err := cp.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	t.Logf("Stop took %s", time.Since(stopBegan).Round(time.Millisecond))
	after := hostState(t)
	if _, err := os.Stat("/sys/class/net/" + localcp.RealNodeBridge); err == nil {
		t.Errorf("bridge %s still exists", localcp.RealNodeBridge)
	}
	if m := mountsUnder(t, dir); len(m) > 0 {
		t.Errorf("still mounted under %s: %v", dir, m)
	}
	if out, err := exec.Command("iptables", "-w", "-t", "nat", "-S", "KUBE-SERVICES").CombinedOutput(); err == nil {
		t.Errorf("KUBE-SERVICES chain still exists:\n%s", out)
	}
	leftCgroup := "/sys/fs/cgroup/memory/configstamp-realnode"
	if mode, err := nodeconfig.Detect(); err == nil && mode.Unified() {
		leftCgroup = "/sys/fs/cgroup/configstamp-realnode"
	}
	if _, err := os.Stat(leftCgroup); err == nil {
		t.Errorf("cgroup %s still exists", leftCgroup)
	}
	if _, err := os.Stat(dir); err == nil {
		t.Errorf("state directory %s still exists", dir)
	}
	switch {
	case strings.Contains(before, "link "+localcp.RealNodeBridge+";"):
		// Start removed a crashed run's node, so before was not clean.
		t.Logf("a previous real node had been left running; host state after Stop: %s", after)
	case before != after:
		t.Errorf("host state changed:\nbefore %s\nafter  %s", before, after)
	}
}

// haveTestApp reports whether `make node-images` built the test app's image,
// which Start imported with the others from <bin>/images.
func haveTestApp() bool {
	bin := os.Getenv("CONFIGSTAMP_BIN")
	if bin == "" {
		bin = "../../bin" // the package directory is test/localcp
	}
	_, err := os.Stat(filepath.Join(bin, "images", "testapp.tar"))
	return err == nil
}

func httpGet(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s", resp.Status)
	}
	return string(data), err
}

// hostState summarises what a real node may change on the host: network
// namespaces in /run/netns, links and the kubelet's sysctls.
func hostState(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		fmt.Fprintf(&b, "netns %s; ", e.Name())
	}
	links, _ := os.ReadDir("/sys/class/net")
	for _, l := range links {
		fmt.Fprintf(&b, "link %s; ", l.Name())
	}
	for _, k := range []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops", "net/ipv4/ip_forward"} {
		v, _ := os.ReadFile("/proc/sys/" + k)
		fmt.Fprintf(&b, "%s=%s; ", k, strings.TrimSpace(string(v)))
	}
	return b.String()
}

func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fields := strings.Fields(s.Text()); len(fields) > 4 && strings.HasPrefix(fields[4], dir) {
			out = append(out, fields[4])
		}
	}
	return out
}

// podPid returns the PID of a task in the node's containerd whose network
// namespace is not the host's: the test's only pod.
func podPid(ctx context.Context, t *testing.T, cp *localcp.ControlPlane) int {
	t.Helper()
	out, err := cp.Ctr(ctx, "tasks", "ls")
	if err != nil {
		t.Fatal(err)
	}
	host, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(out), "\n")[1:] { // TASK PID STATUS
		f := strings.Fields(line)
		if len(f) < 3 || f[2] != "RUNNING" {
			continue
		}
		pid, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		if ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/net", pid)); err == nil && ns != host {
			return pid
		}
	}
	t.Fatalf("no running task in a pod network namespace:\n%s", out)
	return 0
}

// getInNetns GETs url with the admin credentials over a connection made in
// the network namespace of pid, verifying the server as
// kubernetes.default.svc (the name pods use).
func getInNetns(ctx context.Context, cfg *rest.Config, pid int, url string) (string, error) {
	tlsCfg, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return "", err
	}
	tlsCfg.ServerName = "kubernetes.default.svc"
	tr := &http.Transport{
		TLSClientConfig: tlsCfg,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return dialInNetns(ctx, pid, network, addr)
		},
	}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", resp.Status, data)
	}
	return string(data), nil
}

// dialInNetns connects from the network namespace of pid: a socket belongs to
// the namespace of the thread that creates it, so the dial runs on a locked
// thread switched into that namespace and back.
func dialInNetns(ctx context.Context, pid int, network, addr string) (net.Conn, error) {
	type result struct {
		conn net.Conn
		err  error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked if switching back fails: the thread then exits with the goroutine
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer self.Close()
		target, err := os.Open(fmt.Sprintf("/proc/%d/ns/net", pid))
		if err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: err}
			return
		}
		defer target.Close()
		if err := setns(target); err != nil {
			runtime.UnlockOSThread()
			ch <- result{err: fmt.Errorf("entering the network namespace of pid %d: %w", pid, err)}
			return
		}
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if setns(self) == nil {
			runtime.UnlockOSThread()
		}
		ch <- result{conn, err}
	}()
	r := <-ch
	return r.conn, r.err
}

// setnsTrap is setns(2)'s number: package syscall does not define it and
// golang.org/x/sys is not a direct dependency of the module.
var setnsTrap = map[string]uintptr{"amd64": 308, "arm64": 268, "386": 346, "arm": 375, "riscv64": 268, "ppc64le": 350, "s390x": 339}[runtime.GOARCH]

func setns(f *os.File) error {
	if setnsTrap == 0 {
		return fmt.Errorf("setns: syscall number unknown on %s", runtime.GOARCH)
	}
	if _, _, errno := syscall.RawSyscall(setnsTrap, f.Fd(), syscall.CLONE_NEWNET, 0); errno != 0 {
		return errno
	}
	return nil
}
