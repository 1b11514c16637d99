package plugin

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/utils/ptr"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/test/framework"
)

// The canary (issue 38) as the plugin shows it, with configstamp's default
// --canary: plan names the workload that will be the change's canary (the
// first in wave order: beta, by its priority), status marks it while it
// runs and holds the other back, and why shows its hold, then when it passed.
func TestCanaryPlanStatusWhy(t *testing.T) {
	ns := namespace(t, "plugin-canary")
	deploy := func(name string, priority string) *appsv1.Deployment {
		spec := framework.PodSpec()
		framework.MountConfigMap(&spec, "cfg")
		d := framework.Deployment(ns, name, framework.OptIn, spec)
		d.Spec.Replicas = ptr.To[int32](2)
		d.Annotations = map[string]string{rollout.AnnotationVerifyWindow: "10s", rollout.AnnotationPriority: priority}
		return d
	}
	alpha, beta := deploy("alpha", "0"), deploy("beta", "5")
	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"a": "1"}, nil), alpha, beta)
	waitRolledOut(t, alpha, beta)

	next := framework.ConfigMap(ns, "cfg", map[string]string{"a": "2"}, nil)
	file := filepath.Join(t.TempDir(), "cfg.json")
	if err := os.WriteFile(file, []byte(framework.Manifest(t, next)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out := ok(t, "plan", "-f", file, "-n", ns); !strings.Contains(out, "\nCanary: deployment/beta (first in the wave") {
		t.Errorf("plan does not name beta the canary:\n%s", out)
	}

	env.Apply(t, next)
	var st struct {
		Rolling []struct{ Name, State, Canary string }
	}
	framework.Eventually(t, time.Minute, func() (bool, string) {
		jsonOf(t, ok(t, "status", "-n", ns, "-o", "json"), &st)
		return len(st.Rolling) > 0, "no rollout under way yet"
	})
	// The wave order says beta; with --debounce=0 alpha may ask first, before
	// beta is announced, and be the canary: either way, one at a time.
	if len(st.Rolling) != 1 || st.Rolling[0].Canary != "running" {
		t.Fatalf("status rolling %+v: want one workload alone, its change's running canary", st.Rolling)
	}
	canary := "deployment/" + st.Rolling[0].Name
	if out := ok(t, "status", "-n", ns); !regexp.MustCompile(regexp.QuoteMeta(canary) + `\s+rolling \(canary\)`).MatchString(out) {
		t.Errorf("status does not mark %s's canary:\n%s", canary, out)
	}
	human := ok(t, "why", canary, "-n", ns)
	if !regexp.MustCompile(`Canary:\s+running: one new pod first, judged for its verification window; .*held: .*spec\.minReadySeconds=10 \(was: unset\)`).MatchString(human) {
		t.Errorf("why %s while its canary runs:\n%s", canary, human)
	}
	var why struct {
		Canary          string
		CanaryNotBefore *time.Time
		Held            []struct{ Path, Set, Was string }
	}
	jsonOf(t, ok(t, "why", canary, "-n", ns, "-o", "json"), &why)
	if why.Canary != "running" || why.CanaryNotBefore == nil || len(why.Held) == 0 {
		t.Errorf("why %s JSON: %+v", canary, why)
	}

	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		jsonOf(t, ok(t, "why", canary, "-n", ns, "-o", "json"), &why)
		return why.Canary == "passed", fmt.Sprintf("%s's canary: %q", canary, why.Canary)
	})
	passed := beta
	if canary == "deployment/alpha" {
		passed = alpha
	}
	env.WaitEvent(t, passed, "CanaryPassed")
	if out := ok(t, "why", canary, "-n", ns); !regexp.MustCompile(`Canary:\s+passed at \d{4}-`).MatchString(out) {
		t.Errorf("why %s once passed:\n%s", canary, out)
	}
	waitRolledOut(t, alpha, beta)
}
