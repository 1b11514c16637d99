package pin

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/webhook"
)

// TestCanaryHoldsAPinnedRestart: while a change's canary runs (first,
// priority 10, never ready: its canary is judged until the deadline), a
// tenant runs `kubectl rollout restart` on second, a pinned Deployment
// waiting for that canary. The restart rolls second's pods on the snapshot
// it had, not on the untried change, and says why (a WaitingForCanary
// warning and event). Before, second's new pods took the untested
// snapshot, with no rollout record.
func TestCanaryHoldsAPinnedRestart(t *testing.T) {
	ns := env.Namespace(t, "pincanary", nil)
	kc := env.Tenant(t, ns)
	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"k": "good"}, nil),
		pinnedWave(ns, "first", 10, true), pinnedWave(ns, "second", 5, false))
	second := pinnedWave(ns, "second", 5, false)
	waitRolledOut(t, second)
	good := mountedSnapshot(second)

	first, out, err := restartMidCanary(t, ns, kc)
	if err != nil || !strings.Contains(string(out), "canary") {
		t.Fatalf("the tenant's restart: %v\n%s", err, out)
	}
	env.Get(t, first)
	if r := rollout.Read(first.Annotations); r.Canary != rollout.CanaryRunning || r.State != rollout.Rolling {
		t.Fatalf("first's canary ended (%+v) before the restart was judged: the test proves nothing", r)
	}
	env.WaitEvent(t, second, webhook.ReasonHeldByCanary, "keeps the current snapshots")
	env.Get(t, second)
	if mountedSnapshot(second) != good || second.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"] == "" {
		t.Fatalf("after the restart second mounts %s (restartedAt %q); want the restart on the old snapshot %s",
			mountedSnapshot(second), second.Spec.Template.Annotations["kubectl.kubernetes.io/restartedAt"], good)
	}
	waitRolledOut(t, second)
	if got := configMapData(t, ns, mountedSnapshot(second), "cfg"); got["k"] != "good" {
		t.Fatalf("second's restarted pods mount %v, want k=good", got)
	}
}

// restartMidCanary applies a bad change of cfg in ns, waits until first
// (priority 10, never ready) runs its canary, and then has the tenant (kc)
// run `kubectl rollout restart` on second: first, and kubectl's output.
func restartMidCanary(t *testing.T, ns, kc string) (*appsv1.Deployment, []byte, error) {
	t.Helper()
	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"k": "bad"}, nil))
	first := pinnedWave(ns, "first", 10, true)
	framework.Eventually(t, time.Minute, func() (bool, string) {
		env.Get(t, first)
		r := rollout.Read(first.Annotations)
		return r.State == rollout.Rolling && r.Canary == rollout.CanaryRunning, fmt.Sprintf("first: record %+v", r)
	})
	out, err := exec.Command("kubectl", "--kubeconfig", kc, "-n", ns, "rollout", "restart", "deployment/second").CombinedOutput()
	return first, out, err
}

// TestUnpinnedRestartIsWarnedMidCanary: the same restart of a waiting
// workload that is not pinned cannot be held back (its new pods read the
// ConfigMap as it is now: Kubernetes offers nothing to keep them on the old
// data); kubectl prints a warning that says so, naming the running canary's
// change and the pin that would have held it, and an UntriedChange event
// records it. Before, nothing said so.
func TestUnpinnedRestartIsWarnedMidCanary(t *testing.T) {
	ns := env.Namespace(t, "unpinnedcanary", nil)
	kc := env.Tenant(t, ns)
	unpinned := func() *appsv1.Deployment {
		d := pinnedWave(ns, "second", 5, false)
		delete(d.Annotations, pin.AnnotationPin)
		return d
	}
	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"k": "good"}, nil), pinnedWave(ns, "first", 10, true), unpinned())
	second := unpinned()
	waitRolledOut(t, second)

	first, out, err := restartMidCanary(t, ns, kc)
	if err != nil || !strings.Contains(string(out), "Warning:") || !strings.Contains(string(out), "still being tried on another workload, its canary") ||
		!strings.Contains(string(out), pin.AnnotationPin) {
		t.Fatalf("the tenant's restart of an unpinned workload mid-canary: %v\n%s\nwant a warning that its new pods read the untried change", err, out)
	}
	env.Get(t, first)
	if r := rollout.Read(first.Annotations); r.Canary != rollout.CanaryRunning || r.State != rollout.Rolling {
		t.Fatalf("first's canary ended (%+v) before the restart: the test proves nothing", r)
	}
	env.WaitEvent(t, second, webhook.ReasonUntriedChange, "no way to hold back")
}
