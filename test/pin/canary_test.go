package pin

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

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

	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"k": "bad"}, nil))
	first := pinnedWave(ns, "first", 10, true)
	framework.Eventually(t, time.Minute, func() (bool, string) {
		env.Get(t, first)
		r := rollout.Read(first.Annotations)
		return r.State == rollout.Rolling && r.Canary == rollout.CanaryRunning, fmt.Sprintf("first: record %+v", r)
	})
	out, err := exec.Command("kubectl", "--kubeconfig", kc, "-n", ns, "rollout", "restart", "deployment/second").CombinedOutput()
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
