package safety

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

// tenantSpec mounts the tenant's ConfigMap only, so that all its workloads
// share one stamp, known in advance (tenantHash).
func tenantSpec() corev1.PodSpec {
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "tenant-cfg")
	return spec
}

func tenantHash(v string) string {
	return hashOf(tenantNamespace, tenantSpec(), framework.ConfigMap(tenantNamespace, "tenant-cfg", map[string]string{"v": v}, nil))
}

// stuckHashIn is the stamp of a tenantSpec workload of ns when tenant-cfg
// holds v=stuck: its pods never become Ready.
func stuckHashIn(ns string) string {
	return hashOf(ns, tenantSpec(), framework.ConfigMap(ns, "tenant-cfg", map[string]string{"v": "stuck"}, nil))
}

func get[T client.Object](t *testing.T, obj T) T {
	t.Helper()
	env.Get(t, obj)
	return obj
}

func state(t *testing.T, obj client.Object) rollout.Record {
	t.Helper()
	env.Get(t, obj)
	return rollout.Read(obj.GetAnnotations())
}

func slotsInUse(t *testing.T, l *framework.Lane) float64 {
	t.Helper()
	v, err := l.Metrics("configstamp_rollout_slots_in_use")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// waitState polls until obj's rollout record is in state want.
func waitState(t *testing.T, obj client.Object, want rollout.State) {
	t.Helper()
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		r := state(t, obj)
		return r.State == want, fmt.Sprintf("%s %s: rollout-state %q, want %q", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), r.State, want)
	})
}

// Problem 1 of the issue: a finished rollout must stay finished. A StatefulSet
// and a DaemonSet roll for a change and complete; then the StatefulSet is
// scaled, a node joins (its DaemonSet pod never becomes ready) and the
// DaemonSet's image is bumped, past the progress deadline of their rollout. A
// Deployment sharing the change, held back by a long debounce, must still roll.
//
// Not parallel: the node it adds is the cluster's, so it runs first, alone.
func TestFinishedRolloutsStayFinished(t *testing.T) {
	// The late Deployment's debounce annotation holds it back past the others'
	// deadline; --debounce-max-wait must not cut it short.
	l := lane(t, "--debounce-max-wait=2m")
	ns := l.Namespace(t, "life", nil)
	toleration := corev1.Toleration{Key: "configstamp-test/slow", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "shared")
	spec.Tolerations = []corev1.Toleration{toleration}
	sts := framework.StatefulSet(ns, "db", framework.OptIn, spec)
	ds := framework.DaemonSet(ns, "agent", framework.OptIn, spec)
	late := framework.Deployment(ns, "late", framework.OptIn, framework.PodSpec())
	framework.MountConfigMap(&late.Spec.Template.Spec, "shared")
	lateDebounce := 50 * time.Second
	late.Annotations = map[string]string{rollout.AnnotationDebounce: lateDebounce.String()}
	env.Apply(t, framework.ConfigMap(ns, "shared", map[string]string{"v": "1"}, nil), sts, ds, late)
	waitComplete(t, ns, "late")
	waitDone(t, sts, ds)
	lateHash := framework.TemplateHash(get(t, late))

	changed := time.Now()
	env.Apply(t, framework.ConfigMap(ns, "shared", map[string]string{"v": "2"}, nil))
	waitState(t, sts, rollout.Completed)
	waitState(t, ds, rollout.Completed)
	started := state(t, sts).Started
	t.Logf("StatefulSet and DaemonSet rolled and completed %v after the change", time.Since(changed).Round(time.Millisecond))

	// Ordinary cluster life, well within the rollout's progress deadline.
	if err := env.CP.AddNode(t.Context(), slowNode, corev1.Taint{Key: toleration.Key, Value: "x", Effect: corev1.TaintEffectNoSchedule}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _, _ = env.KubectlErr("", "delete", "node", slowNode, "--wait=false") })
	env.Kubectl(t, "", "-n", ns, "scale", "statefulset", "db", "--replicas=3")
	env.Kubectl(t, "", "-n", ns, "set", "image", "daemonset/agent", "app=registry.example/app:2")
	if since := time.Since(started); since > progressDeadline {
		t.Fatalf("the disturbances came %v after the rollout started, past the %v deadline: the test proves nothing", since, progressDeadline)
	}
	// The DaemonSet now never completes (its pod on the slow node stays unready).
	framework.Eventually(t, time.Minute, func() (bool, string) {
		d := get(t, ds)
		return d.Status.DesiredNumberScheduled == 2 && d.Status.NumberUnavailable > 0,
			fmt.Sprintf("daemonset desired %d unavailable %d", d.Status.DesiredNumberScheduled, d.Status.NumberUnavailable)
	})

	// Past the deadline of the finished rollouts, the waiting Deployment rolls
	// (after its debounce, and after the minute the DaemonSet's unready pod
	// holds the rest of the change as a suspect: LateReadyMargin).
	framework.Eventually(t, lateDebounce+2*time.Minute, func() (bool, string) {
		d := get(t, late)
		return framework.TemplateHash(d) != lateHash && framework.RolledOut(d), "the late Deployment has not rolled"
	})
	if time.Since(started) < progressDeadline {
		t.Fatalf("the late Deployment rolled %v after the others started, before their %v deadline: the test proves nothing", time.Since(started), progressDeadline)
	}
	waitComplete(t, ns, "late")
	l.WaitIdle(t, map[string]float64{"deployment": 0})
	for _, obj := range []client.Object{sts, ds} {
		if n := env.CountEvents(t, obj, "RolloutFailed"); n != 0 {
			t.Errorf("%s %s: %d RolloutFailed events after a finished rollout", obj.GetObjectKind().GroupVersionKind().Kind, obj.GetName(), n)
		}
		if r := state(t, obj); r.State != rollout.Completed || r.Halted != "" {
			t.Errorf("%s: record %+v, want completed and not halted", obj.GetName(), r)
		}
	}
	if n := replicaSets(t, ns, "late"); n != 2 {
		t.Errorf("the late Deployment has %d ReplicaSets, want 2 (one rollout)", n)
	}
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		n := slotsInUse(t, l)
		return n == 0, fmt.Sprintf("%v rollout slots in use", n)
	})
}

// waitDone waits until the StatefulSet and DaemonSet are fully rolled out.
func waitDone(t *testing.T, sts *appsv1.StatefulSet, ds *appsv1.DaemonSet) {
	t.Helper()
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		s, d := get(t, sts), get(t, ds)
		ok := s.Status.ObservedGeneration >= s.Generation && s.Status.ReadyReplicas == *s.Spec.Replicas &&
			s.Status.UpdateRevision == s.Status.CurrentRevision &&
			d.Status.ObservedGeneration >= d.Generation && d.Status.DesiredNumberScheduled > 0 &&
			d.Status.NumberAvailable == d.Status.DesiredNumberScheduled && d.Status.UpdatedNumberScheduled == d.Status.DesiredNumberScheduled
		return ok, fmt.Sprintf("statefulset %+v daemonset %+v", s.Status, d.Status)
	})
}

// Problem 2: OnDelete and partitioned workloads first in a wave with a budget
// of one must not hold the slot until the progress deadline.
func TestOnDeleteAndPartitionedHoldNoSlot(t *testing.T) {
	t.Parallel()
	l := lane(t, "--max-concurrent-rollouts=1")
	ns := l.Namespace(t, "strategies", nil)
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "shared")
	first := map[string]string{rollout.AnnotationPriority: "10"}
	onDeleteSTS := framework.StatefulSet(ns, "ondelete-db", framework.OptIn, spec)
	onDeleteSTS.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.OnDeleteStatefulSetStrategyType}
	onDeleteDS := framework.DaemonSet(ns, "ondelete-cni", framework.OptIn, spec)
	onDeleteDS.Spec.UpdateStrategy = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	canary := framework.StatefulSet(ns, "canary-db", framework.OptIn, spec)
	canary.Spec.Replicas = ptr.To[int32](2)
	canary.Spec.UpdateStrategy = appsv1.StatefulSetUpdateStrategy{Type: appsv1.RollingUpdateStatefulSetStrategyType,
		RollingUpdate: &appsv1.RollingUpdateStatefulSetStrategy{Partition: ptr.To[int32](2)}}
	objs := []client.Object{framework.ConfigMap(ns, "shared", map[string]string{"v": "1"}, nil)}
	for _, o := range []client.Object{onDeleteSTS, onDeleteDS, canary} {
		o.SetAnnotations(first)
		objs = append(objs, o)
	}
	deps := []string{"app-0", "app-1", "app-2"}
	for _, n := range deps {
		objs = append(objs, framework.Deployment(ns, n, framework.OptIn, spec))
	}
	env.Apply(t, objs...)
	waitComplete(t, ns, deps...)
	initial := map[string]string{}
	for _, n := range deps {
		initial[n] = framework.TemplateHash(get(t, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n}}))
	}

	env.Apply(t, framework.ConfigMap(ns, "shared", map[string]string{"v": "2"}, nil))
	// The three come first in the wave: the first Deployment can get the
	// only slot once they gave it back. The bound is on when it was
	// stamped, not on when all three Deployments, one after another, had
	// rolled (that took over 30 s once, on a loaded machine, with no slot
	// held: .ci/run).
	began := time.Now()
	var firstStamped time.Duration
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		rolled := 0
		for _, n := range deps {
			d := get(t, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n}})
			if framework.TemplateHash(d) != initial[n] && firstStamped == 0 {
				firstStamped = time.Since(began)
			}
			if framework.TemplateHash(d) != initial[n] && framework.RolledOut(d) {
				rolled++
			}
		}
		return rolled == len(deps), fmt.Sprintf("%d of %d Deployments rolled", rolled, len(deps))
	})
	t.Logf("budget 1, OnDelete StatefulSet and DaemonSet and a partitioned StatefulSet first: the first Deployment stamped %v after the change, all three rolled after %v",
		firstStamped.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	if firstStamped >= progressDeadline {
		t.Errorf("the first Deployment was stamped %v after the change: something held the only slot until the %v deadline", firstStamped, progressDeadline)
	}
	l.WaitIdle(t, map[string]float64{"deployment": 0})
	for _, o := range []client.Object{onDeleteSTS, onDeleteDS, canary} {
		// Stamped, it made no pod of the change: idle, never "completed"
		// (judged once it makes one).
		if r := state(t, o); r.State != rollout.Idle || r.Halted != "" {
			t.Errorf("%s: record %+v, want idle, not halted", o.GetName(), r)
		}
		if n := env.CountEvents(t, o, "RolloutFailed"); n != 0 {
			t.Errorf("%s: %d RolloutFailed events", o.GetName(), n)
		}
		if n := env.Revisions(t, ns, o.GetName()); n != 2 {
			t.Errorf("%s has %d ControllerRevisions, want 2 (stamped once)", o.GetName(), n)
		}
	}
	for _, n := range deps {
		if got := replicaSets(t, ns, n); got != 2 {
			t.Errorf("%s has %d ReplicaSets, want 2", n, got)
		}
	}
}

// Problem 3: five never-ready Deployments with a huge progress deadline
// (opted out of the canary) hold the whole budget of five; a change in another namespace must still roll
// once configstamp's own --progress-deadline gives their slots back.
func TestStuckTenantCannotStarveTheBudget(t *testing.T) {
	t.Parallel()
	l := lane(t)
	ns := l.NamespaceNamed(t, tenantNamespace, nil)
	var objs []client.Object
	objs = append(objs, framework.ConfigMap(ns, "tenant-cfg", map[string]string{"v": "ok"}, nil))
	var stuck []string
	for i := 0; i < 5; i++ {
		d := framework.Deployment(ns, "stuck-"+strconv.Itoa(i), framework.OptIn, tenantSpec())
		d.Spec.ProgressDeadlineSeconds = ptr.To[int32](2147483647)
		// The tenant opts out of the canary, which would hold its change
		// at one workload: all five take a slot.
		d.Annotations = map[string]string{rollout.AnnotationCanaryOpt: "false"}
		objs = append(objs, d)
		stuck = append(stuck, d.Name)
	}
	env.Apply(t, objs...)
	waitComplete(t, ns, stuck...)

	other := l.Namespace(t, "other", nil)
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "cfg")
	app := framework.Deployment(other, "app", framework.OptIn, spec)
	env.Apply(t, framework.ConfigMap(other, "cfg", map[string]string{"v": "1"}, nil), app)
	waitComplete(t, other, "app")
	before := framework.TemplateHash(get(t, app))

	env.Apply(t, framework.ConfigMap(ns, "tenant-cfg", map[string]string{"v": "stuck"}, nil))
	framework.Eventually(t, time.Minute, func() (bool, string) {
		n := slotsInUse(t, l)
		return n == 5, fmt.Sprintf("%v slots in use, waiting for the five stuck rollouts", n)
	})
	// The bound runs from when the five hold the budget: how long kubectl
	// and the debounce took before that (seconds, on a loaded machine) is
	// not a slot held.
	tenantChange := time.Now()
	env.Apply(t, framework.ConfigMap(other, "cfg", map[string]string{"v": "2"}, nil))
	framework.Eventually(t, progressDeadline+time.Minute, func() (bool, string) {
		return framework.TemplateHash(get(t, app)) != before, "the other namespace's Deployment is not stamped"
	})
	waited := time.Since(tenantChange)
	t.Logf("five stuck rollouts held the budget of 5; the other namespace's change was stamped %v after they started (deadline %v)",
		waited.Round(time.Millisecond), progressDeadline)
	if waited > progressDeadline+10*time.Second {
		t.Errorf("the other namespace waited %v, more than --progress-deadline %v + 10s", waited, progressDeadline)
	}
	waitComplete(t, other, "app")
	for _, n := range stuck {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n}}
		waitState(t, d, rollout.Failed)
		env.WaitEvent(t, d, "RolloutFailed", "progress deadline of "+progressDeadline.String())
	}
}

// A restart of configstamp (as a new leader) mid-rollout continues the
// progress deadline where it was. A Deployment's rollout is stuck from its
// stamp (its new pod never becomes Ready); configstamp is killed half way
// into the deadline and started again (it leads once the killed process's
// lease expired). The rollout fails by the deadline counted from its new
// pod, as the pods show, or at once when the new leader first looks past
// it: well before a whole deadline after the restart, when a fresh
// deadline would end (before the fix: 68 s after its stamp, killed at 20 s).
func TestRestartKeepsTheProgressDeadline(t *testing.T) {
	t.Parallel()
	l := lane(t)
	ns := l.NamespaceNamed(t, deadlineNamespace, nil)
	d := framework.Deployment(ns, "stuck", framework.OptIn, tenantSpec())
	d.Spec.ProgressDeadlineSeconds = ptr.To[int32](2147483647)              // configstamp's deadline, not its controller's, fails it
	d.Annotations = map[string]string{rollout.AnnotationCanaryOpt: "false"} // rolled whole, not held at a canary pod
	env.Apply(t, framework.ConfigMap(ns, "tenant-cfg", map[string]string{"v": "ok"}, nil), d)
	waitComplete(t, ns, d.Name)

	env.Apply(t, framework.ConfigMap(ns, "tenant-cfg", map[string]string{"v": "stuck"}, nil))
	waitState(t, d, rollout.Rolling)
	started := state(t, d).Started
	restartAt := started.Add(progressDeadline / 2)
	framework.Eventually(t, progressDeadline, func() (bool, string) {
		r := state(t, d)
		if r.State != rollout.Rolling {
			return true, ""
		}
		return !time.Now().Before(restartAt), fmt.Sprintf("rollout-state %q, %v into the deadline", r.State, time.Since(started).Round(time.Second))
	})
	if r := state(t, d); r.State != rollout.Rolling {
		t.Fatalf("the rollout is %q %v after its stamp, before the restart: want it rolling until its deadline of %v", r.State, time.Since(started), progressDeadline)
	}
	l.Kill()
	if err := l.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	restarted := time.Since(started)
	waitState(t, d, rollout.Failed)
	failed := time.Since(started)
	env.WaitEvent(t, d, "RolloutFailed", "progress deadline of "+progressDeadline.String())
	t.Logf("killed and started again %v after the stamp; the rollout failed %v after it (deadline %v)",
		restarted.Round(100*time.Millisecond), failed.Round(100*time.Millisecond), progressDeadline)
	// A fresh deadline would count from the new leader's first look, at least
	// the lease's 15 s after the restart: it would end past restarted+45 s.
	if limit := restarted + progressDeadline + 5*time.Second; failed > limit {
		t.Errorf("the rollout failed %v after its stamp, %v after the restart: as late as a fresh deadline (%v) would end: the restart gave it one",
			failed.Round(100*time.Millisecond), (failed - restarted).Round(100*time.Millisecond), progressDeadline)
	}
}

// oneApp creates, in a new namespace of a lane of its own, an opted-in
// Deployment "app" mounting the ConfigMap "cfg" (v=1) and waits until it is
// available.
func oneApp(t *testing.T, prefix string) (*framework.Lane, string, *appsv1.Deployment) {
	t.Helper()
	l := lane(t)
	ns := l.Namespace(t, prefix, nil)
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "cfg")
	app := framework.Deployment(ns, "app", framework.OptIn, spec)
	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"v": "1"}, nil), app)
	waitComplete(t, ns, "app")
	return l, ns, app
}

// Problem 5: a record made in another cluster (a restore) names source
// versions this cluster never had; the next change must still roll.
func TestRestoredRecordRollsOnNextChange(t *testing.T) {
	t.Parallel()
	_, ns, app := oneApp(t, "restore")
	before := framework.TemplateHash(get(t, app))
	env.Kubectl(t, "", "-n", ns, "annotate", "--overwrite", "deployment", "app", stamp.AnnotationSourceVersions+"=ConfigMap/cfg=987654321")

	changed := time.Now()
	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"v": "2"}, nil))
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		return framework.TemplateHash(get(t, app)) != before, "not stamped after the change"
	})
	t.Logf("a record with source versions from another cluster rolled %v after the change", time.Since(changed).Round(time.Millisecond))
	waitComplete(t, ns, "app")
	if n := replicaSets(t, ns, "app"); n != 2 {
		t.Errorf("%d ReplicaSets, want 2 (one rollout)", n)
	}
}

// Problem 6: a manifest exported with kubectl get -o yaml and re-applied by a
// GitOps tool carries a stale applied-hash; configstamp records quietly.
func TestStaleAppliedHashRecordsQuietly(t *testing.T) {
	t.Parallel()
	l, ns, app := oneApp(t, "echo")
	old := framework.TemplateHash(get(t, app))
	env.Apply(t, framework.ConfigMap(ns, "cfg", map[string]string{"v": "2"}, nil))
	current := env.WaitTemplateHash(t, app, old)
	waitComplete(t, ns, "app")
	l.WaitIdle(t, map[string]float64{"deployment": 0})
	startedBefore := get(t, app).Annotations[rollout.AnnotationStarted]
	eventsBefore := env.CountEvents(t, app, "ConfigChanged")
	rollouts, err := l.Metrics("configstamp_rollouts_started_total")
	if err != nil {
		t.Fatal(err)
	}

	since := map[string]float64{"deployment": l.ReconcileCounts(t)["deployment"]}
	env.Kubectl(t, "", "-n", ns, "annotate", "--overwrite", "deployment", "app", stamp.AnnotationAppliedHash+"="+old)
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		h := get(t, app).Annotations[stamp.AnnotationAppliedHash]
		return h == current, "applied-hash is " + h
	})
	l.WaitIdle(t, since)
	if after, _ := l.Metrics("configstamp_rollouts_started_total"); after != rollouts {
		t.Errorf("rollouts started went from %v to %v for a re-applied stale record", rollouts, after)
	}
	if n := env.CountEvents(t, app, "ConfigChanged"); n != eventsBefore {
		t.Errorf("ConfigChanged events went from %d to %d", eventsBefore, n)
	}
	if s := get(t, app).Annotations[rollout.AnnotationStarted]; s != startedBefore {
		t.Errorf("rollout-started moved from %s to %s", startedBefore, s)
	}
	if n := replicaSets(t, ns, "app"); n != 2 {
		t.Errorf("%d ReplicaSets, want 2", n)
	}
}

// A Deployment its user paused, alone in its change, is not stamped with
// it: its pods, once resumed, would run the change whole and untried, and
// it can make no canary pod now. `kubectl rollout resume` then makes it
// the change's canary: stamped (one replica: its whole rollout is the
// canary), judged from then, and completed and
// verified. (Before: it was stamped at once, its record idle, and judged
// whole once resumed.)
func TestAPausedWorkloadIsJudgedOnceResumed(t *testing.T) {
	t.Parallel()
	l := lane(t)
	ns := l.Namespace(t, "paused", nil)
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "cfg")
	d := framework.Deployment(ns, "app", framework.OptIn, spec)
	pausedThenChanged(t, d, framework.ConfigMap(ns, "cfg", map[string]string{"v": "1"}, nil), framework.ConfigMap(ns, "cfg", map[string]string{"v": "2"}, nil))
	if n := replicaSets(t, ns, d.Name); n != 1 {
		t.Fatalf("%d ReplicaSets while paused, want 1: it made no pod of the change", n)
	}
	resumed := time.Now()
	env.Kubectl(t, "", "rollout", "resume", "-n", ns, "deployment/"+d.Name)
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		r := state(t, d)
		return r.State == rollout.Completed && r.Canary != rollout.NoCanary && !r.Started.Before(resumed.Truncate(time.Second)) && r.Verified == framework.TemplateHash(get(t, d)),
			fmt.Sprintf("record %+v: want completed, its change's canary passed, judged from the resume (%v), verified", r, resumed.Format(time.RFC3339))
	})
	if n := replicaSets(t, ns, d.Name); n != 2 {
		t.Errorf("%d ReplicaSets, want 2 (rolled once)", n)
	}
}

// ranBad adds to ran the pods of apps in ns that run the change stamped bad.
func ranBad(t *testing.T, ns, bad string, ran map[string]bool, apps ...string) {
	t.Helper()
	for _, app := range apps {
		for _, p := range env.LivePods(t, ns, map[string]string{"app": app}) {
			if p.Annotations[stamp.AnnotationHash] == bad {
				ran[p.Name] = true
			}
		}
	}
}

// tenantApp is an opted-in Deployment of ns, three replicas of tenantSpec.
func tenantApp(ns, name string) *appsv1.Deployment {
	d := framework.Deployment(ns, name, framework.OptIn, tenantSpec())
	d.Spec.Replicas = ptr.To[int32](3)
	return d
}

// pausedThenChanged applies d with its ConfigMap as cm, waits until it is
// complete, pauses it (kubectl rollout pause), applies changed, and checks
// that d stays unstamped.
func pausedThenChanged(t *testing.T, d *appsv1.Deployment, cm, changed *corev1.ConfigMap) {
	t.Helper()
	env.Apply(t, cm, d)
	waitComplete(t, d.Namespace, d.Name)
	before := framework.TemplateHash(get(t, d))
	env.Kubectl(t, "", "rollout", "pause", "-n", d.Namespace, "deployment/"+d.Name)
	env.Apply(t, changed)
	stayUnstamped(t, d, before)
}

// stayUnstamped watches d for a while past the change it was not to be
// stamped with (past the lane's 2 s debounce and the scheduler's own waits
// of a few seconds), failing if its template's stamp moves from before.
func stayUnstamped(t *testing.T, d *appsv1.Deployment, before string) {
	t.Helper()
	unchangedFor(t, d, before, 12*time.Second)
}

// unchangedFor watches obj for d, failing if its template's stamp moves
// from before.
func unchangedFor(t *testing.T, obj client.Object, before string, d time.Duration) {
	t.Helper()
	from := time.Now()
	framework.Eventually(t, d+time.Minute, func() (bool, string) {
		if h := framework.TemplateHash(get(t, obj)); h != before {
			t.Fatalf("%s was stamped (%s, record %+v) %v after the change: want it left unstamped", obj.GetName(), h, state(t, obj), time.Since(from).Round(time.Millisecond))
		}
		return time.Since(from) > d, "watching the stamp"
	})
}

// A Deployment of three replicas whose strategy lets all three be
// replaced at once (maxSurge 100%), paused by its user, alone in its
// change; the change is bad (kwok keeps its pods unready). Resumed, it is
// held at one new pod as its change's canary, which fails: one pod ran the
// bad change, not three. Before, it was stamped while paused and rolled
// whole once resumed: three pods of the bad change at once.
func TestAResumedWorkloadIsHeldAsTheCanary(t *testing.T) {
	t.Parallel()
	l := lane(t)
	ns := l.NamespaceNamed(t, resumeNamespace, nil)
	d := tenantApp(ns, "app")
	d.Spec.Strategy.RollingUpdate = &appsv1.RollingUpdateDeployment{MaxSurge: ptr.To(intstr.FromString("100%")), MaxUnavailable: ptr.To(intstr.FromInt32(0))}
	pausedThenChanged(t, d, framework.ConfigMap(ns, "tenant-cfg", map[string]string{"v": "ok"}, nil), framework.ConfigMap(ns, "tenant-cfg", map[string]string{"v": "stuck"}, nil))
	env.Kubectl(t, "", "rollout", "resume", "-n", ns, "deployment/"+d.Name)
	bad, ran := stuckHashIn(ns), map[string]bool{}
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		ranBad(t, ns, bad, ran, d.Name)
		r := state(t, d)
		return r.State == rollout.Failed, fmt.Sprintf("record %+v; pods of the bad change %d", r, len(ran))
	})
	env.WaitEvent(t, d, "RolloutFailed", "")
	if len(ran) != 1 {
		t.Fatalf("%d pods ran the bad change (%v), want 1: resumed, it was to be held as its change's canary", len(ran), ran)
	}
}

// TestAScaleUpDuringTheHoldGivesTheCanaryItsShare: a canary held at one new
// pod of a bad change (three replicas; the pod never becomes Ready) is
// scaled to nine by its user, as an HPA would. The Deployment controller
// spreads the added replicas over its ReplicaSets in proportion to their
// size, paused or not, so the new one gets its share: Kubernetes allows no
// way to hold it at one pod then. What the test bounds is that share (one
// pod of four before the scale-up, so at most 1 + 6/4 rounded up), and that
// the canary still fails and halts its change.
func TestAScaleUpDuringTheHoldGivesTheCanaryItsShare(t *testing.T) {
	t.Parallel()
	l := lane(t)
	ns := l.NamespaceNamed(t, scaleNamespace, nil)
	d := tenantApp(ns, "app")
	env.Apply(t, framework.ConfigMap(ns, "tenant-cfg", map[string]string{"v": "ok"}, nil), d)
	waitComplete(t, ns, d.Name)
	env.Apply(t, framework.ConfigMap(ns, "tenant-cfg", map[string]string{"v": "stuck"}, nil))
	bad, ran := stuckHashIn(ns), map[string]bool{}
	framework.Eventually(t, time.Minute, func() (bool, string) {
		ranBad(t, ns, bad, ran, d.Name)
		r := state(t, d)
		return len(ran) == 1 && r.Canary == rollout.CanaryRunning, fmt.Sprintf("record %+v; pods of the bad change %d", r, len(ran))
	})
	env.Kubectl(t, "", "scale", "-n", ns, "deployment/"+d.Name, "--replicas=9")
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		ranBad(t, ns, bad, ran, d.Name)
		r := state(t, d)
		return r.State == rollout.Failed && r.Halted != "", fmt.Sprintf("record %+v; pods of the bad change %d", r, len(ran))
	})
	ranBad(t, ns, bad, ran, d.Name)
	t.Logf("%d pods ran the bad change after a scale-up from 3 to 9 during the hold", len(ran))
	if len(ran) > 3 {
		t.Fatalf("%d pods ran the bad change (%v), want at most 3: the canary's one and its proportional share of the scale-up", len(ran), ran)
	}
}
