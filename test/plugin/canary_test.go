package plugin

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
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
	if !regexp.MustCompile(`Canary:\s+running: one new pod first, judged for its verification window; .*held: .*spec\.minReadySeconds=70 \(was: unset\)`).MatchString(human) {
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

// A change of two ConfigMaps in two namespaces: plan names every canary,
// one per namespace and per change (key-precise: "other" references key b,
// a change of its own); once the file is applied, why names the running
// canary's pod as the controller judges it (its phase, readiness and
// restarts, until when it is judged, the verdict), and each change gets
// exactly the canaries plan said, one each.
func TestCanaryPodAndEveryCanary(t *testing.T) {
	nsA, nsB := namespace(t, "plugin-canaries-a"), namespace(t, "plugin-canaries-b")
	deploy := func(ns, name, key, window string) *appsv1.Deployment {
		spec := framework.PodSpec()
		keyRef(&spec, stamp.KindConfigMap, "cfg", key)
		d := framework.Deployment(ns, name, framework.OptIn, spec)
		d.Spec.Replicas = ptr.To[int32](2)
		d.Annotations = map[string]string{rollout.AnnotationVerifyWindow: window}
		return d
	}
	one, two, other := deploy(nsA, "one", "a", "20s"), deploy(nsA, "two", "a", "20s"), deploy(nsA, "other", "b", "20s")
	x1, x2 := deploy(nsB, "x1", "x", "5s"), deploy(nsB, "x2", "x", "5s")
	all := []*appsv1.Deployment{one, two, other, x1, x2}
	env.Apply(t, framework.ConfigMap(nsA, "cfg", map[string]string{"a": "1", "b": "1"}, nil), framework.ConfigMap(nsB, "cfg", map[string]string{"x": "1"}, nil),
		one, two, other, x1, x2)
	waitRolledOut(t, all...)

	file := filepath.Join(t.TempDir(), "cfg.yaml")
	manifest := framework.Manifest(t, framework.ConfigMap(nsA, "cfg", map[string]string{"a": "2", "b": "2"}, nil),
		framework.ConfigMap(nsB, "cfg", map[string]string{"x": "2"}, nil))
	if err := os.WriteFile(file, []byte(manifest), 0o644); err != nil {
		t.Fatal(err)
	}
	golden(t, "plan-canaries", ok(t, "plan", "-f", file))
	var plan struct {
		Objects []struct {
			Namespace string
			Workloads []struct {
				Name, WaitsFor string
				Canary         bool
			}
		}
	}
	jsonOf(t, ok(t, "plan", "-f", file, "-o", "json"), &plan)
	predicted := map[string]string{}
	for _, o := range plan.Objects {
		for _, w := range o.Workloads {
			predicted[o.Namespace+"/"+w.Name] = cmp.Or(w.WaitsFor, fmt.Sprint(w.Canary))
		}
	}
	if want := map[string]string{nsA + "/one": "true", nsA + "/two": "deployment/one", nsA + "/other": "true", nsB + "/x1": "true", nsB + "/x2": "deployment/x1"}; !maps.Equal(predicted, want) {
		t.Errorf("plan's canaries %v, want %v", predicted, want)
	}

	env.Kubectl(t, manifest, "apply", "-f", "-")
	// With --debounce=0 either workload of key a's change may ask first and
	// be its canary; the one that is shows its pod while it is judged.
	type whyCanary struct {
		Canary            string
		CanaryJudgedUntil *time.Time
		CanaryPods        []struct {
			Name, Phase  string
			Ready        bool
			Restarts     int
			HealthySince *time.Time
		}
	}
	var canary string
	var why whyCanary
	framework.Eventually(t, time.Minute, func() (bool, string) {
		for _, d := range []string{"deployment/one", "deployment/two"} {
			why = whyCanary{}
			jsonOf(t, ok(t, "why", d, "-n", nsA, "-o", "json"), &why)
			if why.Canary == "running" && why.CanaryJudgedUntil != nil && len(why.CanaryPods) > 0 {
				canary = d
				return true, ""
			}
		}
		return false, fmt.Sprintf("no running canary of key a's change with a Ready pod yet: %+v", why)
	})
	pod := why.CanaryPods[0]
	if pod.Phase != "Running" || !pod.Ready || pod.Restarts != 0 || pod.HealthySince == nil || !why.CanaryJudgedUntil.Equal(pod.HealthySince.Add(20*time.Second)) {
		t.Errorf("why %s: canary pod %+v judged until %v; want Running, Ready, no restart, judged until its healthy start + 20s", canary, pod, why.CanaryJudgedUntil)
	}
	var pods corev1.PodList
	if err := env.Client.List(t.Context(), &pods, client.InNamespace(nsA), client.MatchingLabels{"app": strings.TrimPrefix(canary, "deployment/")}); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(pods.Items, func(p corev1.Pod) bool { return p.Name == pod.Name }) {
		t.Errorf("why %s names the pod %s, not one of its own", canary, pod.Name)
	}
	human := ok(t, "why", canary, "-n", nsA)
	for _, re := range []string{`Canary pods?:\s+` + regexp.QuoteMeta(pod.Name) + ` Running, Ready since \d{4}-\S+, 0 restarts`,
		`Judged until:\s+\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ \(`, `Verdict:\s+running\n`} {
		if !regexp.MustCompile(re).MatchString(human) {
			t.Errorf("why %s while its canary runs: no %s in\n%s", canary, re, human)
		}
	}

	waitRolledOut(t, all...)
	got := map[string]string{}
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		for _, d := range all {
			env.Get(t, d)
			got[d.Namespace+"/"+d.Name] = d.Annotations[rollout.AnnotationCanary] + "/" + d.Annotations[rollout.AnnotationState]
		}
		done := 0
		for _, v := range got {
			if strings.HasSuffix(v, "/completed") {
				done++
			}
		}
		return done == len(all), fmt.Sprintf("records %v", got)
	})
	passed := func(keys ...string) int {
		n := 0
		for _, k := range keys {
			if got[k] == "passed/completed" {
				n++
			}
		}
		return n
	}
	if passed(nsA+"/one", nsA+"/two") != 1 || passed(nsA+"/other") != 1 || passed(nsB+"/x1", nsB+"/x2") != 1 {
		t.Errorf("records %v: want one canary per change, as plan said (key a's in %s, key b's, x's in %s)", got, nsA, nsB)
	}
}
