//go:build linux

package realnode_test

import (
	"fmt"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/test/framework"
)

// TestCanaryAtTheEdges is the edge table of docs/rollout-safety.md ("The
// canary at the edges"), on the real node at configstamp's defaults: the
// state a workload is in when a change arrives, × a bad or a good change.
// The rows run side by side, a namespace each, on one configstamp. In each,
// a (rollout-priority 10) comes first in the wave and shares one
// ConfigMap with the others, two replicas each.
func TestCanaryAtTheEdges(t *testing.T) {
	t.Parallel()
	l := lane(t, defaultFlags...)
	for name, row := range map[string]func(t *testing.T, ns string){
		"paused by its user, a bad change":                                  pausedFirstBadChange,
		"Recreate first by name, a bad change":                              recreateFirstBadChange,
		"no replicas, a bad change, then a scale-up":                        noReplicasFirstBadChange,
		"progressDeadlineSeconds 60, a good change":                         shortDeadlineGoodChange,
		"a readiness gate, a good change":                                   readinessGateGoodChange,
		"pods that exit once at start, a good change":                       exitOnceGoodChange,
		"resume after a bad change, then a fix":                             resumeThenFix,
		"OnDelete first, a DaemonSet with an unavailable pod, a bad change": onDeleteAndUnavailableBadChange,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			row(t, l.Namespace(t, "edge", nil))
		})
	}
}

// edgeApps are a (first in the wave) and others, two replicas of the test
// app each, reading ConfigMap shared (mode good), shaped by shape; applied,
// and Ready (ready: what makes their pods Ready besides their containers).
func edgeApps(t *testing.T, ns string, others []string, shape func(*appsv1.Deployment), ready func()) []*appsv1.Deployment {
	t.Helper()
	objs := []client.Object{configMap(ns, "shared", "good")}
	var ds []*appsv1.Deployment
	for _, n := range append([]string{"a"}, others...) {
		d := deployment(ns, n, "shared", appOptions{})
		d.Spec.Replicas = ptr.To(int32(2))
		if n == "a" {
			d.Annotations = map[string]string{rollout.AnnotationPriority: "10"}
		}
		if shape != nil {
			shape(d)
		}
		ds = append(ds, d)
		objs = append(objs, d)
	}
	env.Apply(t, objs...)
	for _, d := range ds {
		framework.Eventually(t, 4*time.Minute, func() (bool, string) {
			if ready != nil {
				ready()
			}
			env.Get(t, d)
			ok, why := rolledOut(d)
			return ok, d.Name + ": " + why
		})
	}
	return ds
}

// badPods adds to ran the pods of ds whose stamp is not the one each ran
// before the change.
func badPods[W client.Object](t *testing.T, ds []W, before map[string]string, ran map[string]bool) {
	t.Helper()
	for _, d := range ds {
		for _, p := range pods(t, d.GetNamespace(), d.GetName()) {
			if h := p.Annotations["configstamp.io/config-hash"]; h != "" && h != before[d.GetName()] {
				ran[p.Name] = true
			}
		}
	}
}

func stamps[W client.Object](t *testing.T, ds []W) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, d := range ds {
		env.Get(t, d)
		out[d.GetName()] = framework.TemplateHash(d)
	}
	return out
}

// a was paused by its user (kubectl rollout pause): it can make no pod of
// the change, so it is never the canary. b, next in the wave, is: its one
// new pod rejects the value, the change is halted, and no other workload is
// stamped. Before: a "passed" with no pod, and b, c and d were stamped at
// once (6 bad pods, 4 workloads).
func pausedFirstBadChange(t *testing.T, ns string) {
	ds := edgeApps(t, ns, []string{"b", "c", "d"}, nil, nil)
	env.Kubectl(t, "", "-n", ns, "rollout", "pause", "deployment/a")
	changed := time.Now()
	onlyBRanIt(t, ds)
	if rec := record(t, ds[0]); rec.State == rollout.Completed && rec.Started.After(changed) {
		t.Fatalf("a, paused, has a completed record of the bad change: %+v", rec)
	}
}

// a (first by name) is a Recreate Deployment: its canary would replace
// both its pods at once. b, which a hold keeps at one new pod, is the
// cheaper canary, and the wave's first: its one new pod rejects the value,
// the change is halted, a is never stamped. Before: a was the canary, and
// both its pods ran the bad value.
func recreateFirstBadChange(t *testing.T, ns string) {
	ds := edgeApps(t, ns, []string{"b"}, func(d *appsv1.Deployment) {
		if d.Name == "a" {
			d.Spec.Strategy = appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
			delete(d.Annotations, rollout.AnnotationPriority) // a first by name, at b's priority
		}
	}, nil)
	onlyBRanIt(t, ds)
}

// a is a StatefulSet with updateStrategy OnDelete (first in the wave): its
// controller replaces no pod for a new template, so it can make no pod of
// the change and is never the canary. a-ds, at b's priority and before it
// by name, is a DaemonSet whose one pod is not available (its readiness
// probe fails on the value it runs): its controller replaces an
// unavailable pod at once, whatever maxUnavailable allows, so a canary of
// it costs its node and that pod. b, held at one new pod, is the cheaper
// canary: its pod rejects the value, the change is halted, neither a nor
// a-ds is ever stamped. (One row for both: each costs the real-node lane.)
func onDeleteAndUnavailableBadChange(t *testing.T, ns string) {
	a := framework.StatefulSet(ns, "a", framework.OptIn, appSpec("shared", appOptions{}))
	a.Annotations = map[string]string{rollout.AnnotationPriority: "10"}
	a.Spec.Replicas = ptr.To(int32(2))
	a.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	ads := framework.DaemonSet(ns, "a-ds", framework.OptIn, appSpec("shared", appOptions{probe: true,
		env: map[string]string{"APP_REJECT": "good", "APP_FAIL_MODE": "unready"}}))
	b := deployment(ns, "b", "shared", appOptions{})
	b.Spec.Replicas = ptr.To(int32(2))
	env.Apply(t, configMap(ns, "shared", "good"), a, ads, b)
	framework.Eventually(t, 4*time.Minute, func() (bool, string) {
		env.Get(t, ads)
		ps := pods(t, ns, "a-ds")
		s := ads.Status
		return s.ObservedGeneration >= ads.Generation && s.DesiredNumberScheduled == 1 && s.NumberUnavailable == 1 && len(ps) == 1 && ps[0].Status.Phase == corev1.PodRunning,
			fmt.Sprintf("a-ds's one pod running and unavailable: %+v, %d pods", s, len(ps))
	})
	waitReady(t, a, 4*time.Minute)
	waitReady(t, b, 4*time.Minute)
	onlyBRanIt(t, []client.Object{a, b, ads})
}

// a has no replicas: it can make no pod of the change, so it is never the
// canary, and it is not stamped while the change has passed none (its
// pods, once scaled up, would run the change untried). b's canary fails;
// a, scaled to two replicas while the change is halted, runs the value
// it had.
func noReplicasFirstBadChange(t *testing.T, ns string) {
	ds := edgeApps(t, ns, []string{"b", "c"}, func(d *appsv1.Deployment) {
		if d.Name == "a" {
			d.Spec.Replicas = ptr.To(int32(0))
		}
	}, nil)
	before := onlyBRanIt(t, ds)
	env.Kubectl(t, "", "-n", ns, "scale", "deployment/a", "--replicas=2")
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		env.Get(t, ds[0])
		ok, why := rolledOut(ds[0])
		return ok && ds[0].Status.ReadyReplicas == 2, "a after its scale-up: " + why
	})
	ran := map[string]bool{}
	badPods(t, ds, before, ran)
	if len(ran) != 1 || framework.TemplateHash(ds[0]) != before["a"] {
		t.Fatalf("after a's scale-up while the change is halted: %d pods ran the bad value (%v), a stamped %s (before %s); want b's one, a unchanged",
			len(ran), keys(ran), framework.TemplateHash(ds[0]), before["a"])
	}
	t.Logf("a, scaled up while the change was halted, runs the value it had")
}

// onlyBRanIt applies a bad value to ds's ConfigMap and waits until b, the
// canary, failed, then watches past the halted workloads' recheck (30 s),
// the debounce and a window: exactly one pod, of b, ran the bad value, and
// b alone was stamped. It returns the stamps from before the change.
func onlyBRanIt[W client.Object](t *testing.T, ds []W) map[string]string {
	t.Helper()
	b := ds[1]
	before := stamps(t, ds)
	changed := time.Now()
	env.Apply(t, configMap(b.GetNamespace(), "shared", "bad"))
	ran := map[string]bool{}
	framework.Eventually(t, 3*time.Minute, func() (bool, string) {
		badPods(t, ds, before, ran)
		return failedNote(t, b) != "", fmt.Sprintf("no RolloutFailed on b yet; b's record %+v, a's %+v; pods that ran the bad value %v",
			record(t, b), record(t, ds[0]), keys(ran))
	})
	t.Logf("b, the canary, failed %s after the change", since(changed))
	watched := time.Now()
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		badPods(t, ds, before, ran)
		return time.Since(watched) > 65*time.Second, "watching the halt"
	})
	now := stamps(t, ds)
	var stamped []string
	for _, d := range ds {
		if now[d.GetName()] != before[d.GetName()] {
			stamped = append(stamped, d.GetName())
		}
	}
	if len(ran) != 1 || len(stamped) != 1 || stamped[0] != "b" {
		t.Fatalf("%d pods ran the bad value (%v), stamped %v; want exactly one pod, of b, the only workload stamped", len(ran), keys(ran), stamped)
	}
	t.Logf("one pod ran the bad value (%v); no workload but b was stamped", keys(ran))
	return before
}

// a and b have progressDeadlineSeconds: 60. The canary's hold keeps
// minReadySeconds below it (the API server rejects it otherwise), so the
// change rolls both, and afterwards their specs are what was applied,
// stamp aside. Before: every stamp write was rejected, nothing rolled.
func shortDeadlineGoodChange(t *testing.T, ns string) {
	ds := edgeApps(t, ns, []string{"b"}, func(d *appsv1.Deployment) { d.Spec.ProgressDeadlineSeconds = ptr.To(int32(60)) }, nil)
	applied := map[string]appsv1.DeploymentSpec{}
	for _, d := range ds {
		applied[d.Name] = *d.Spec.DeepCopy()
	}
	before := stamps(t, ds)
	changed := time.Now()
	env.Apply(t, configMap(ns, "shared", "two"))
	for _, d := range ds {
		framework.Eventually(t, 4*time.Minute, func() (bool, string) {
			env.Get(t, d)
			rec := rollout.Read(d.Annotations)
			ok, why := rolledOut(d)
			return ok && framework.TemplateHash(d) != before[d.Name] && rec.State == rollout.Completed && rec.Hold == "",
				fmt.Sprintf("%s: stamp %s, record %+v, %s", d.Name, framework.TemplateHash(d), rec, why)
		})
		got := d.Spec.DeepCopy()
		got.Template.Annotations = applied[d.Name].Template.Annotations
		if !equality.Semantic.DeepEqual(*got, applied[d.Name]) {
			t.Errorf("%s's spec after the rollout differs from what was applied: strategy %+v minReadySeconds %d", d.Name, got.Strategy, got.MinReadySeconds)
		}
	}
	if n := env.CountEvents(t, ds[0], controllers.ReasonCanaryPassed); n != 1 {
		t.Errorf("a has %d CanaryPassed events, want 1: a was the change's canary, held", n)
	}
	t.Logf("a and b rolled and were verified %s after the change", since(changed))
}

// lbGate is the readiness gate of readinessGateGoodChange's pods.
const lbGate = corev1.PodConditionType("test.configstamp.io/load-balancer")

// a and b gate their pods' readiness on a load balancer's condition, which
// the test sets, as the load balancer's controller would, on the pods it
// chooses. A good change: a's canary pod runs and its containers are
// Ready, but its gate is not set: the canary does not pass, and b is not
// stamped, past the window and its margin. Once the gate is set, the
// canary passes and both roll. Before: the canary passed on its
// containers' readiness, and b was stamped while a's new pod never was Ready.
func readinessGateGoodChange(t *testing.T, ns string) {
	gated := func(d *appsv1.Deployment) {
		d.Spec.Template.Spec.ReadinessGates = []corev1.PodReadinessGate{{ConditionType: lbGate}}
	}
	var gateFor func(p corev1.Pod) bool // which pods the load balancer finds healthy
	balance := func() {
		for _, n := range []string{"a", "b"} {
			for _, p := range pods(t, ns, n) {
				if gateFor(p) {
					setGate(t, p)
				}
			}
		}
	}
	gateFor = func(corev1.Pod) bool { return true }
	ds := edgeApps(t, ns, []string{"b"}, gated, balance)
	before := stamps(t, ds)
	gateFor = func(p corev1.Pod) bool { return p.Annotations["configstamp.io/config-hash"] == before[p.Labels["app"]] }
	changed := time.Now()
	env.Apply(t, configMap(ns, "shared", "two"))
	var canaryUp time.Time
	framework.Eventually(t, 4*time.Minute, func() (bool, string) {
		balance()
		if now := stamps(t, ds); now["b"] != before["b"] {
			t.Fatalf("b stamped %s after the change, before a's canary pod was Ready (its gate unset): record of a %+v", since(changed), record(t, ds[0]))
		}
		for _, p := range pods(t, ns, "a") {
			if p.Annotations["configstamp.io/config-hash"] != before["a"] && containersReadyFor(p) > 0 && canaryUp.IsZero() {
				canaryUp = time.Now()
			}
		}
		// The window (30 s) and then some: a canary passed on its
		// containers alone would have stamped b by now.
		return !canaryUp.IsZero() && time.Since(canaryUp) > 50*time.Second, fmt.Sprintf("a's canary pod not running yet; record %+v", record(t, ds[0]))
	})
	if rec := record(t, ds[0]); rec.Canary != rollout.CanaryRunning {
		t.Fatalf("a's record %+v, want its canary still running: its pod's gate is unset", rec)
	}
	t.Logf("a's canary pod's containers were Ready for 50 s with its gate unset: not passed, b not stamped (%s after the change)", since(changed))
	gateFor = func(corev1.Pod) bool { return true }
	gateSet := time.Now()
	for _, d := range ds {
		framework.Eventually(t, 4*time.Minute, func() (bool, string) {
			balance()
			env.Get(t, d)
			rec := rollout.Read(d.Annotations)
			ok, why := rolledOut(d)
			return ok && framework.TemplateHash(d) != before[d.Name] && rec.State == rollout.Completed,
				fmt.Sprintf("%s: record %+v, %s", d.Name, rec, why)
		})
	}
	t.Logf("with the gate set, the canary passed and both rolled in %s", since(gateSet))
}

// containersReadyFor is how long p's ContainersReady has been True (0: not).
func containersReadyFor(p corev1.Pod) time.Duration {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.ContainersReady && c.Status == corev1.ConditionTrue {
			return max(time.Since(c.LastTransitionTime.Time), time.Nanosecond)
		}
	}
	return 0
}

// setGate sets p's lbGate condition True, as a load balancer's controller
// does (a strategic merge of the one condition into its status), once.
func setGate(t *testing.T, p corev1.Pod) {
	t.Helper()
	for _, c := range p.Status.Conditions {
		if c.Type == lbGate && c.Status == corev1.ConditionTrue {
			return
		}
	}
	patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"True","lastTransitionTime":%q}]}}`, lbGate, metav1.Now().UTC().Format(time.RFC3339))
	if err := env.Client.Status().Patch(t.Context(), &p, client.RawPatch(types.StrategicMergePatchType, []byte(patch))); err != nil {
		t.Logf("setting %s's gate: %v", p.Name, err)
	}
}

// exitFirst makes a Deployment's pods exit once at their first start, then
// run (a dependency not up yet): APP_EXIT_FIRST on an emptyDir.
func exitFirst(d *appsv1.Deployment) {
	spec := &d.Spec.Template.Spec
	spec.Volumes = append(spec.Volumes, corev1.Volume{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}})
	c := &spec.Containers[0]
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "scratch", MountPath: "/scratch"})
	c.Env = append(c.Env, corev1.EnvVar{Name: "APP_EXIT_FIRST", Value: "/scratch/started"})
}

// applied is each Deployment's spec as applied.
func appliedSpecs(ds []*appsv1.Deployment) map[string]appsv1.DeploymentSpec {
	out := map[string]appsv1.DeploymentSpec{}
	for _, d := range ds {
		out[d.Name] = *d.Spec.DeepCopy()
	}
	return out
}

// waitFixed waits until each of ds rolled a stamp other than before's
// (every pod of it Ready) and its record is completed or a failure that
// halts nothing, then diffs its spec against what was applied, stamp aside.
func waitFixed(t *testing.T, ds []*appsv1.Deployment, before map[string]string, applied map[string]appsv1.DeploymentSpec, timeout time.Duration) {
	t.Helper()
	for _, d := range ds {
		framework.Eventually(t, timeout, func() (bool, string) {
			env.Get(t, d)
			rec := rollout.Read(d.Annotations)
			ok, why := rolledOut(d)
			done := rec.State == rollout.Completed || (rec.State == rollout.Failed && rec.Halted == "")
			return ok && framework.TemplateHash(d) != before[d.Name] && done && d.Annotations[rollout.AnnotationHold] == "",
				fmt.Sprintf("%s: stamp %s, record %+v, paused %v, %s", d.Name, framework.TemplateHash(d), rec, d.Spec.Paused, why)
		})
		got := d.Spec.DeepCopy()
		got.Template.Annotations = applied[d.Name].Template.Annotations
		if !equality.Semantic.DeepEqual(*got, applied[d.Name]) {
			t.Errorf("%s's spec differs from what was applied: paused %v strategy %+v minReadySeconds %d", d.Name, got.Paused, got.Strategy, got.MinReadySeconds)
		}
	}
}

// a's and b's pods each exit once at their first start, then run. A good
// change: a's canary pod restarts at once, so a fails and is paused; its
// pod then stays healthy for a full window, which lifts the halt and puts
// back the pause and the hold, so the change completes its wave, later
// than a clean one. Before: a stayed paused for good and b was never
// stamped.
func exitOnceGoodChange(t *testing.T, ns string) {
	ds := edgeApps(t, ns, []string{"b"}, exitFirst, nil)
	applied := appliedSpecs(ds)
	before := stamps(t, ds)
	changed := time.Now()
	env.Apply(t, configMap(ns, "shared", "two"))
	framework.Eventually(t, 3*time.Minute, func() (bool, string) {
		return failedNote(t, ds[0]) != "", fmt.Sprintf("no RolloutFailed on a yet; record %+v", record(t, ds[0]))
	})
	t.Logf("a's canary failed on its restart at start %s after the change", since(changed))
	waitFixed(t, ds, before, applied, 6*time.Minute)
	if n := env.CountEvents(t, ds[0], controllers.ReasonRolloutRecovered); n < 1 {
		t.Errorf("a has no RolloutRecovered event: its halt lifted otherwise")
	}
	t.Logf("lasting health lifted a's halt and pause; a and b rolled %s after the change", since(changed))
}

// A bad change fails a's canary, which is paused; the user resumes it as
// the plugin does (its halted annotation removed): configstamp puts back
// the pause and the hold at once. A fix then rolls both, and their specs
// are what was applied. Before: a stayed paused with its bad pod, never
// rolled the fix, and its record said completed.
func resumeThenFix(t *testing.T, ns string) {
	ds := edgeApps(t, ns, []string{"b"}, nil, nil)
	applied := appliedSpecs(ds)
	before := stamps(t, ds)
	env.Apply(t, configMap(ns, "shared", "bad"))
	framework.Eventually(t, 3*time.Minute, func() (bool, string) {
		env.Get(t, ds[0])
		return failedNote(t, ds[0]) != "" && ds[0].Spec.Paused, fmt.Sprintf("a not failed and paused yet; record %+v", record(t, ds[0]))
	})
	resumed := time.Now()
	env.Kubectl(t, "", "-n", ns, "annotate", "deployment/a", rollout.AnnotationHalted+"-")
	framework.Eventually(t, time.Minute, func() (bool, string) {
		env.Get(t, ds[0])
		return !ds[0].Spec.Paused && ds[0].Spec.MinReadySeconds == 0, fmt.Sprintf("a still paused %v, minReadySeconds %d", ds[0].Spec.Paused, ds[0].Spec.MinReadySeconds)
	})
	t.Logf("a's pause and hold put back %s after its halt was removed", since(resumed))
	// The event is recorded after the patch it tells of landed, and the
	// recorder writes it on its own: the spec can show first (make test, ci25).
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		n := env.CountEvents(t, ds[0], controllers.ReasonPauseLifted)
		return n == 1, fmt.Sprintf("a has %d PauseLifted events, want 1", n)
	})
	fixed := time.Now()
	env.Apply(t, configMap(ns, "shared", "fixed"))
	waitFixed(t, ds, before, applied, 5*time.Minute)
	t.Logf("the fix rolled a and b %s after it was applied", since(fixed))
}
