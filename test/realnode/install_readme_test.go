//go:build linux

// The install tests install configstamp as a user does, on the real node:
// its own image (built like the Dockerfile, hack/images), the README's
// commands read from the README's own fenced blocks and run with bash, so
// the doc and the test cannot drift. They run one after another, before the
// lanes' tests (t.Parallel), and uninstall what they installed.

package realnode_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/hack/images"
	"github.com/configstamp/configstamp/test/framework"
)

// shippedImage is the image config/manager names, as the kubelet asks
// containerd for it: hack/images names the image it builds so
// (test/manifests checks that the two agree).
const shippedImage = images.ConfigstampRef

// managerNamespace is where every overlay but config/namespaced installs.
const managerNamespace = "configstamp-system"

// TestREADMEInstallSelfSigned runs "Without cert-manager" and then "Opt a
// workload in and check it works" verbatim: configstamp runs in pods on the
// node under its shipped security context and probes, the API server calls
// its webhook through the Service, the example is stamped at CREATE and
// rolls once, and its new pod's mounted file holds the new value. Then, on
// the running install: the memory limit the process runs with, the metrics'
// authorization, the leader killed mid-wave, configstamp's own rolling
// restart, and the uninstall.
func TestREADMEInstallSelfSigned(t *testing.T) {
	managers := install(t, "### Without cert-manager")
	checkMemoryLimit(t, managers[0])
	checkExample(t)
	checkMetricsAuth(t, managers[0])
	checkLeaderKill(t)
	checkOwnRestart(t)
	checkUninstall(t, "config/selfsigned")
}

// install makes configstamp's image the one the manifests name, runs the
// README's block under heading (an install) and returns the manager pods,
// each Ready through its own probes with no restart.
func install(t *testing.T, heading string) []corev1.Pod {
	t.Helper()
	tagImage(t)
	t.Cleanup(func() {
		if t.Failed() { // what a user would look at first
			out, _, _ := env.KubectlErr("", "-n", managerNamespace, "get", "pods", "-o", "wide")
			logs, _, _ := env.KubectlErr("", "-n", managerNamespace, "logs", "deployment/configstamp-controller-manager", "--previous", "--tail=5")
			t.Logf("manager pods:\n%s\nthe last container's log:\n%s", out, logs)
		}
	})
	applied := time.Now()
	runBlock(t, heading, 5*time.Minute)
	t.Logf("README %q: Ready %s after the apply", heading, time.Since(applied).Round(100*time.Millisecond))
	managers := managerPods(t)
	if len(managers) == 0 {
		t.Fatal("no manager pods")
	}
	for _, p := range managers {
		for _, c := range p.Status.ContainerStatuses {
			if !c.Ready || c.RestartCount != 0 {
				t.Errorf("manager pod %s container %s: ready %v, %d restarts; want Ready with 0", p.Name, c.Name, c.Ready, c.RestartCount)
			}
		}
	}
	return managers
}

// tagImage checks that the node holds configstamp's image under the name the
// manifests use: make node-images builds bin/images/configstamp.tar with that
// name and the suite imports it with the node's images, so the README's
// blocks run it as they are (no tag, no IMG). A missing image fails here
// rather than as an ImagePullBackOff: the node has no registry.
func tagImage(t *testing.T) {
	t.Helper()
	out, err := env.CP.Ctr(t.Context(), "images", "ls", "-q")
	if err != nil {
		t.Fatalf("listing the node's images: %v", err)
	}
	if !slices.Contains(strings.Fields(string(out)), shippedImage) {
		t.Fatalf("the node has no %s (make node-images builds bin/images/configstamp.tar); it has %s", shippedImage, strings.Fields(string(out)))
	}
}

// managerPods lists the manager pods that are not being deleted.
func managerPods(t *testing.T) []corev1.Pod {
	t.Helper()
	return env.LivePods(t, managerNamespace, managerLabels)
}

// managerLabels select the manager pods.
var managerLabels = map[string]string{"app.kubernetes.io/name": "configstamp", "app.kubernetes.io/component": "manager"}

// checkExample runs "Opt a workload in and check it works" and checks what
// it promises on the node; it deletes the example's namespace when done, so
// the next install can run it again.
func checkExample(t *testing.T) {
	t.Helper()
	ctx := t.Context()
	started := time.Now()
	runBlock(t, "## Opt a workload in and check it works", 5*time.Minute)
	d := &appsv1.Deployment{}
	if err := env.Client.Get(ctx, client.ObjectKey{Namespace: "demo", Name: "app"}, d); err != nil {
		t.Fatal(err)
	}
	hash := framework.TemplateHash(d)
	if !strings.HasPrefix(hash, "v1-") {
		t.Fatalf("the example's stamp is %q: the webhook did not answer through the Service", hash)
	}
	// Stamped at CREATE and rolled once by the change: two ReplicaSets.
	framework.Eventually(t, time.Minute, func() (bool, string) {
		rss := env.ReplicaSets(t, "demo", "app")
		return len(rss) == 2, fmt.Sprintf("%d ReplicaSets, want 2 (created stamped, rolled once)", len(rss))
	})
	data := waitPodReads(t, "demo", "app", hash, "config", "greeting", "bonjour")
	t.Logf("README example: stamped at CREATE, rolled once; the new pod's file reads %q, %s after the example started", data,
		time.Since(started).Round(100*time.Millisecond))
	env.Kubectl(t, "", "delete", "namespace", "demo", "--wait=true", "--timeout=2m")
}

// waitPodReads waits until the Deployment app in ns has one running pod,
// of the template stamped hash, and returns what that pod's volume holds in
// file, failing unless it is want: what the container reads, on the node.
func waitPodReads(t *testing.T, ns, app, hash, volume, file, want string) string {
	t.Helper()
	return podReads(t, runningPod(t, ns, app, hash), volume, file, want)
}

// runningPod waits until the Deployment app in ns has exactly one running
// pod of the template stamped hash, and returns it.
func runningPod(t *testing.T, ns, app, hash string) corev1.Pod {
	t.Helper()
	var pod corev1.Pod
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		var live []corev1.Pod
		for _, p := range env.LivePods(t, ns, map[string]string{"app": app}) {
			if p.Annotations[stamp.AnnotationHash] == hash && p.Status.Phase == corev1.PodRunning {
				live = append(live, p)
			}
		}
		if len(live) != 1 {
			return false, fmt.Sprintf("%d running pods of %s/%s stamped %s", len(live), ns, app, hash)
		}
		pod = live[0]
		return true, ""
	})
	return pod
}

// podReads returns the content of file in pod's volume on the node, failing
// unless it is want.
func podReads(t *testing.T, pod corev1.Pod, volume, file, want string) string {
	t.Helper()
	data, err := readVolume(pod, volume, file)
	if err != nil || data != want {
		t.Fatalf("pod %s/%s's %s/%s: %q (%v), want %q", pod.Namespace, pod.Name, volume, file, data, err, want)
	}
	return data
}

// readVolume reads file in pod's volume on the node.
func readVolume(pod corev1.Pod, volume, file string) (string, error) {
	data, err := os.ReadFile(env.CP.PodVolumeFile(string(pod.UID), volume, file))
	return string(data), err
}

// checkMemoryLimit reads, from a manager's log, the soft memory limit the
// process runs with: 90% of the container's limit, which reaches it through
// the downward API (CONFIGSTAMP_MEMORY_LIMIT).
func checkMemoryLimit(t *testing.T, manager corev1.Pod) {
	t.Helper()
	var limit int64
	for _, c := range manager.Spec.Containers {
		if c.Name == "manager" {
			limit = c.Resources.Limits.Memory().Value()
		}
	}
	if limit == 0 {
		t.Fatalf("manager pod %s has no memory limit", manager.Name)
	}
	want := fmt.Sprintf("%d bytes (90%% of CONFIGSTAMP_MEMORY_LIMIT)", int64(float64(limit)*0.9))
	logs, _ := env.Kubectl(t, "", "-n", managerNamespace, "logs", manager.Name, "-c", "manager")
	for _, line := range strings.Split(logs, "\n") {
		if strings.Contains(line, "memory settings") {
			if !strings.Contains(line, want) {
				t.Fatalf("manager %s runs with %s; want a soft limit of %s (limit %d bytes)", manager.Name, line, want, limit)
			}
			t.Logf("memory limit %d bytes reaches the process: %s", limit, line)
			return
		}
	}
	t.Fatalf("manager %s logged no memory settings:\n%s", manager.Name, logs)
}

// checkMetricsAuth scrapes a manager's /metrics where its metrics Service
// points (the pod's :8443, HTTPS): 401 without a token, the metrics with a
// token of a ServiceAccount bound to the shipped metrics-reader ClusterRole.
func checkMetricsAuth(t *testing.T, manager corev1.Pod) {
	t.Helper()
	env.Kubectl(t, "", "-n", "default", "create", "serviceaccount", "scraper")
	env.Kubectl(t, "", "create", "clusterrolebinding", "scraper", "--clusterrole=configstamp-metrics-reader", "--serviceaccount=default:scraper")
	token, _ := env.Kubectl(t, "", "-n", "default", "create", "token", "scraper")
	url := "https://" + manager.Status.PodIP + ":8443/metrics"
	// The metrics server's certificate is self-signed in memory (no
	// --metrics-cert-path in config/selfsigned): what is checked is who may read.
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // see above
	get := func(bearer string) (int, string) {
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(bearer))
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		return resp.StatusCode, string(body)
	}
	if code, _ := get(""); code != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: %d, want 401", code)
	}
	framework.Eventually(t, 30*time.Second, func() (bool, string) { // the binding reaches the authorizer's cache
		code, body := get(token)
		return code == http.StatusOK && strings.Contains(body, "configstamp_rollouts_started_total"), fmt.Sprintf("/metrics with the metrics-reader's token: %d", code)
	})
}

// checkUninstall deletes what the README installed from overlay and checks that nothing
// is left that would block or slow a write: no webhook configuration, and an
// opted-in Deployment is created at once.
func checkUninstall(t *testing.T, overlay string) {
	t.Helper()
	env.Kubectl(t, "", "delete", "-k", filepath.Join(env.Root, overlay), "--wait=true", "--timeout=2m")
	framework.Eventually(t, time.Minute, func() (bool, string) {
		out, _ := env.Kubectl(t, "", "get", "mutatingwebhookconfigurations", "-o", "name")
		return !strings.Contains(out, "configstamp"), "left: " + out
	})
	ns := env.Namespace(t, "after", nil)
	began := time.Now()
	env.Kubectl(t, framework.Manifest(t, framework.Deployment(ns, "after", framework.OptIn, framework.PodSpec())), "apply", "--dry-run=server", "-f", "-")
	if took := time.Since(began); took > 5*time.Second {
		t.Errorf("creating an opted-in Deployment after the uninstall took %v: something still waits on configstamp", took)
	}
}

// runBlock runs the first ```sh block after heading in README.md with bash
// (-e, pipefail), in the repository, against the suite's cluster.
func runBlock(t *testing.T, heading string, timeout time.Duration) {
	t.Helper()
	runDocBlock(t, "README.md", heading, timeout)
}

// runDocBlock runs the first ```sh block after heading in the repository's
// file doc, as runBlock does.
func runDocBlock(t *testing.T, doc, heading string, timeout time.Duration) {
	t.Helper()
	block := docBlock(t, doc, heading)
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-euo", "pipefail", "-c", block)
	cmd.Dir = env.Root
	cmd.Env = append(os.Environ(), "KUBECONFIG="+env.Kubeconfig)
	out, err := cmd.CombinedOutput()
	t.Logf("%s %q:\n%s", doc, heading, out)
	if err != nil {
		t.Fatalf("%s %q failed: %v", doc, heading, err)
	}
}

// docBlock is the first ```sh fenced block after the line heading in the
// repository's file doc. A block fenced otherwise is never run: the README's
// install from a release (```sh release) downloads a published release, which
// this node cannot; test/docs checks its URLs instead.
func docBlock(t *testing.T, doc, heading string) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(env.Root, doc))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(raw), "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != heading {
			continue
		}
		var block []string
		in := false
		for _, l := range lines[i+1:] {
			switch {
			case !in && strings.HasPrefix(l, "#"):
				t.Fatalf("%s: no ```sh block under %q", doc, heading)
			case !in && strings.TrimSpace(l) == "```sh":
				in = true
			case in && strings.TrimSpace(l) == "```":
				return strings.Join(block, "\n")
			case in:
				block = append(block, l)
			}
		}
	}
	t.Fatalf("%s has no heading %q", doc, heading)
	return ""
}
