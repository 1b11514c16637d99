//go:build linux

package realnode_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/test/framework"
)

// TestNamespacedInstall runs docs/scoping.md's "Namespaced install"
// verbatim (config/namespaced: Roles in example-a and example-b, no manager
// ClusterRole): in a watched namespace an opted-in Deployment is stamped at
// CREATE and a change rolls it once, its new pod reading the new value; in
// any other namespace an opted-in Deployment is not stamped (the webhook's
// namespaceSelector leaves it out); configstamp's log has no Forbidden.
func TestNamespacedInstall(t *testing.T) {
	tagImage(t)
	uninstallOnFailure(t, filepath.Join(env.Root, "config", "namespaced"))
	runDocBlock(t, "docs/scoping.md", "## Namespaced install", 3*time.Minute)
	env.Kubectl(t, "", "-n", managerNamespace, "rollout", "status", "deployment/configstamp-controller-manager", "--timeout=3m")
	env.Apply(t, framework.ConfigMap("example-a", "app-config", map[string]string{"greeting": "hello"}, nil))
	waitWebhook(t, "example-a", "app-config")

	d := appWithGreeting(t, "example-a", "app", nil)
	hash := framework.TemplateHash(d)
	if !strings.HasPrefix(hash, "v1-") {
		t.Fatalf("example-a/app's stamp at CREATE is %q: the webhook did not answer", hash)
	}
	waitPodReads(t, "example-a", "app", hash, "app-config", "greeting", "hello")
	env.Kubectl(t, "", "-n", "example-a", "patch", "configmap", "app-config", "--type=merge", "-p", `{"data":{"greeting":"bonjour"}}`)
	changed := env.WaitTemplateHash(t, d, hash)
	framework.Eventually(t, time.Minute, func() (bool, string) {
		rss := env.ReplicaSets(t, "example-a", "app")
		return len(rss) == 2, fmt.Sprintf("%d ReplicaSets, want 2 (created stamped, rolled once)", len(rss))
	})
	waitPodReads(t, "example-a", "app", changed, "app-config", "greeting", "bonjour")

	other := env.Namespace(t, "unwatched", nil)
	env.Apply(t, framework.ConfigMap(other, "app-config", map[string]string{"greeting": "hello"}, nil))
	outside := framework.Deployment(other, "app", framework.OptIn, mountingGreeting())
	if err := env.Client.Create(t.Context(), outside, client.DryRunAll); err != nil {
		t.Fatal(err)
	}
	if h := framework.TemplateHash(outside); h != "" {
		t.Fatalf("a Deployment in the unwatched namespace %s was stamped %q", other, h)
	}
	for _, p := range managerPods(t) {
		logs, _ := env.Kubectl(t, "", "-n", managerNamespace, "logs", p.Name, "-c", "manager")
		if strings.Contains(strings.ToLower(logs), "forbidden") {
			t.Errorf("manager %s logged a Forbidden under the namespaced Roles:\n%s", p.Name, logs)
		}
	}
	t.Logf("config/namespaced: example-a/app stamped at CREATE (%s), rolled once, its new pod reads bonjour; %s left alone", hash, other)
	env.Kubectl(t, "", "delete", "-k", filepath.Join(env.Root, "config", "namespaced"), "--wait=true", "--timeout=2m")
	env.Kubectl(t, "", "delete", "namespace", "example-a", "example-b", "--wait=false")
}

// TestPinnedConfigOnTheNode installs config/selfsigned with the pin
// component, as docs/pinning.md says, and shows on real containers what
// pinning is for. Two Deployments mount the same ConfigMap, one pinned; both
// are paused, so neither rolls (nor is stamped: a paused workload waits
// for its change's canary), and the ConfigMap changes: the kubelet
// rewrites the unpinned pod's file, the pinned pod's file keeps the old
// value. Resumed, the pinned Deployment is stamped as the change's canary,
// rolls, and its new pod reads the new value; `kubectl rollout undo` brings the old value back while the
// ConfigMap holds the new one.
func TestPinnedConfigOnTheNode(t *testing.T) {
	tagImage(t)
	dir := withComponents(t, "config/selfsigned", "../components/pin")
	uninstallOnFailure(t, dir)
	env.Kubectl(t, "", "apply", "-k", dir)
	env.Kubectl(t, "", "-n", managerNamespace, "rollout", "status", "deployment/configstamp-controller-manager", "--timeout=3m")

	ns := env.Namespace(t, "pinned", nil)
	env.Apply(t, framework.ConfigMap(ns, "app-config", map[string]string{"greeting": "hello"}, nil))
	waitWebhook(t, ns, "app-config")
	pinned := appWithGreeting(t, ns, "pinned", map[string]string{pin.AnnotationPin: "true"})
	control := appWithGreeting(t, ns, "control", nil)
	if snap := pinned.Spec.Template.Spec.Volumes[0].ConfigMap.Name; snap == "app-config" || !strings.HasPrefix(framework.TemplateHash(pinned), "v1-") {
		t.Fatalf("the pinned Deployment was admitted stamped %q mounting %q, want a stamp and a snapshot", framework.TemplateHash(pinned), snap)
	}
	pinnedPod := runningPod(t, ns, "pinned", framework.TemplateHash(pinned))
	controlPod := runningPod(t, ns, "control", framework.TemplateHash(control))
	podReads(t, pinnedPod, "app-config", "greeting", "hello")
	podReads(t, controlPod, "app-config", "greeting", "hello")

	env.Kubectl(t, "", "-n", ns, "rollout", "pause", "deployment/pinned", "deployment/control")
	env.Kubectl(t, "", "-n", ns, "patch", "configmap", "app-config", "--type=merge", "-p", `{"data":{"greeting":"bonjour"}}`)
	changed := time.Now()
	// The kubelet rewrites a mounted ConfigMap at the pod's next sync (every
	// kubeletSync, with jitter): the unpinned pod's file changing is when to look.
	framework.Eventually(t, 3*time.Minute, func() (bool, string) {
		data, err := readVolume(controlPod, "app-config", "greeting")
		return err == nil && data == "bonjour", fmt.Sprintf("the unpinned pod still reads %q (%v)", data, err)
	})
	updated := time.Since(changed)
	// Each pod is resynced on its own schedule: the pinned pod must keep
	// the old value past the latest the kubelet would have rewritten it.
	for time.Since(changed) < kubeletResync {
		podReads(t, pinnedPod, "app-config", "greeting", "hello")
		<-time.After(time.Second)
	}
	t.Logf("with no rollout: the unpinned pod read bonjour %s after the change; the pinned pod still read hello %s after it",
		updated.Round(100*time.Millisecond), time.Since(changed).Round(100*time.Millisecond))

	// Paused, neither was stamped: the change passed no canary, and a
	// paused workload can make no canary pod. Resumed, the pinned one is
	// stamped as the change's canary, and rolls.
	env.Kubectl(t, "", "-n", ns, "rollout", "resume", "deployment/pinned")
	restamped := &appsv1.Deployment{}
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(pinned), restamped); err != nil {
			return false, err.Error()
		}
		return framework.TemplateHash(restamped) != framework.TemplateHash(pinned), "the resumed Deployment not stamped with the change yet"
	})
	env.Kubectl(t, "", "-n", ns, "rollout", "status", "deployment/pinned", "--timeout=2m")
	waitPodReads(t, ns, "pinned", framework.TemplateHash(restamped), "app-config", "greeting", "bonjour")

	env.Kubectl(t, "", "-n", ns, "rollout", "undo", "deployment/pinned")
	env.Kubectl(t, "", "-n", ns, "rollout", "status", "deployment/pinned", "--timeout=2m")
	waitPodReads(t, ns, "pinned", framework.TemplateHash(pinned), "app-config", "greeting", "hello")
	cm := &corev1.ConfigMap{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "app-config"}, cm); err != nil || cm.Data["greeting"] != "bonjour" {
		t.Fatalf("the ConfigMap after the undo: %v (%v), want greeting=bonjour", cm.Data, err)
	}
	t.Logf("resumed, the pinned Deployment rolled and its pod reads bonjour; after kubectl rollout undo its pod reads hello, the ConfigMap still bonjour")
	env.Kubectl(t, "", "delete", "namespace", ns, "--wait=true", "--timeout=2m")
	env.Kubectl(t, "", "delete", "-k", dir, "--wait=true", "--timeout=2m")
}

// kubeletResync bounds when the kubelet rewrites a mounted ConfigMap's files
// after a change: it resyncs each pod every kubeletSync (its syncFrequency)
// with up to half of it again as jitter, and its ConfigMap cache is a watch;
// 10 s more for a busy machine.
const kubeletResync = kubeletSync*3/2 + 10*time.Second

// mountingGreeting is a pause container with the ConfigMap app-config
// mounted (the volume app-config).
func mountingGreeting() corev1.PodSpec {
	spec := pauseSpec()
	framework.MountConfigMap(&spec, "app-config")
	return spec
}

// appWithGreeting applies, in ns, the ConfigMap app-config (greeting=hello)
// and the opted-in Deployment name mounting it, with annotations, and
// returns the Deployment as admitted once it has rolled out.
func appWithGreeting(t *testing.T, ns, name string, annotations map[string]string) *appsv1.Deployment {
	t.Helper()
	d := framework.Deployment(ns, name, framework.OptIn, mountingGreeting())
	d.Annotations = annotations
	env.Apply(t, framework.ConfigMap(ns, "app-config", map[string]string{"greeting": "hello"}, nil), d)
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(d), d); err != nil {
			return false, err.Error()
		}
		return framework.RolledOut(d), fmt.Sprintf("%s/%s not rolled out: %+v", ns, name, d.Status)
	})
	return d
}
