// Package safety tests rollout safety end to end on the full local control
// plane: debounce, the concurrency budget, halting a bad change, and resuming
// a wave after configstamp is killed.
package safety

import (
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

var env *framework.Env

// hashKey is the suite's HMAC key, so the test can compute stamps in advance.
var hashKey = []byte("configstamp-safety-suite-hmac-key!")

// The bad data and the namespaces it is applied in are fixed, so that the
// stamps of the rollouts meant to hang are known before kwok starts: kwok keeps
// pods with those stamps unready, as an application would crash on a bad
// config. Pods on the slow node never become ready either (a node that joins
// and stays unready).
const (
	haltNamespace   = "halt"
	tenantNamespace = "tenant"
	// deadlineNamespace: a stuck tenant's change (tenantHash's) in a
	// namespace of its own, for TestRestartKeepsTheProgressDeadline.
	deadlineNamespace = "deadline"
	// optOutNamespace: a failed canary's workload that opts out
	// (TestOptingOutPutsBackTheHold), its pods of tenantHash's change
	// never Ready.
	optOutNamespace = "optout"
	// resumeNamespace: a paused workload resumed with a bad change
	// (TestAResumedWorkloadIsHeldAsTheCanary), its pods of tenantHash's
	// change never Ready.
	resumeNamespace = "resumed"
	// costNamespace: a Recreate Deployment beside a holdable one, a bad
	// change (TestTheCheapestCanaryGoesFirst).
	costNamespace = "cost"
	// orderedNamespace: a StatefulSet whose canary fails
	// (TestAFailedOrderedReadyStatefulSetWarnsOfItsPod).
	orderedNamespace = "ordered"
	// scaleNamespace: a held canary scaled up by its user
	// (TestAScaleUpDuringTheHoldGivesTheCanaryItsShare).
	scaleNamespace = "scaleup"
	// deletedNamespace, imageNamespace: a user deletes the canary, or edits
	// its image, while it runs (TestUserActsOnTheCanary).
	deletedNamespace = "canary-deleted"
	imageNamespace   = "canary-image"
	slowNode         = "kwok-slow"
	// progressDeadline is the suite's --progress-deadline.
	progressDeadline = 30 * time.Second
)

// haltNamespaces run the halt scenario: lifted by a fix, by deleting the
// failed workload, by removing its halted annotation.
var haltNamespaces = []string{haltNamespace, "halt-delete", "halt-unannotate"}

// The control plane is the suite's; each test runs a configstamp of its own
// (lane), so the tests run side by side.
func TestMain(m *testing.M) {
	held := []string{tenantHash("stuck"), stuckHashIn(deadlineNamespace), stuckHashIn(optOutNamespace), stuckHashIn(resumeNamespace), stuckHashIn(costNamespace), stuckHashIn(orderedNamespace), stuckHashIn(scaleNamespace), stuckHashIn(deletedNamespace), stuckHashIn(imageNamespace), stuckHashIn(ringBaseNamespace), crashingAgentHash()}
	for _, ns := range haltNamespaces {
		held = append(held, haltWorkloadHash(ns, "bad"))
	}
	os.Exit(framework.MainHolding(m, &env, framework.Config{Plane: framework.Kwok, NoConfigstamp: true}, held, slowNode))
}

// suiteFlags: a budget of 5, a 2 s debounce, a short progress deadline.
var suiteFlags = []string{"--max-concurrent-rollouts=5", "--debounce=2s", "--progress-deadline=" + progressDeadline.String()}

// lane runs the test's own configstamp (framework.Lane) with the suite's key
// and flags, then flags (later flags win).
func lane(t *testing.T, flags ...string) *framework.Lane {
	t.Helper()
	return env.LaneWith(t, framework.LaneOptions{HashKey: hashKey}, append(slices.Clone(suiteFlags), flags...)...)
}

// haltSpec is the pod spec of halt-wave workload name: its own ConfigMap and the shared one.
func haltSpec(name string) corev1.PodSpec {
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "cfg-"+name)
	framework.MountConfigMap(&spec, "shared")
	return spec
}

// hashOf is the stamp of a workload in ns with spec when the ConfigMaps hold cms.
func hashOf(ns string, spec corev1.PodSpec, cms ...*corev1.ConfigMap) string {
	return framework.StampOf(hashKey, ns, spec, cms...)
}

// haltWorkloadHash is the stamp of the third halt-wave workload of ns when the
// shared ConfigMap holds mode=shared.
func haltWorkloadHash(ns, shared string) string {
	name := haltNames[2]
	return hashOf(ns, haltSpec(name),
		framework.ConfigMap(ns, "cfg-"+name, map[string]string{"v": name}, nil),
		framework.ConfigMap(ns, "shared", map[string]string{"mode": shared}, nil))
}

var haltNames = []string{"w-0", "w-1", "w-2", "w-3", "w-4", "w-5"}

func replicaSets(t *testing.T, ns, app string) int { return len(env.ReplicaSets(t, ns, app)) }

func waitComplete(t *testing.T, ns string, names ...string) {
	t.Helper()
	framework.Eventually(t, 3*time.Minute, func() (bool, string) {
		for _, n := range names {
			d := &appsv1.Deployment{}
			d.Namespace, d.Name = ns, n
			env.Get(t, d)
			if !framework.RolledOut(d) {
				return false, "deployment " + n + " not rolled out"
			}
		}
		return true, ""
	})
}

// createWave creates n opted-in Deployments that each mount their own
// ConfigMap and the shared one, and waits until all are available.
func createWave(t *testing.T, ns string, names []string, annotate func(*appsv1.Deployment)) map[string]string {
	t.Helper()
	objs := []client.Object{framework.ConfigMap(ns, "shared", map[string]string{"mode": "one"}, nil)}
	for _, n := range names {
		objs = append(objs, framework.ConfigMap(ns, "cfg-"+n, map[string]string{"v": n}, nil))
		d := framework.Deployment(ns, n, framework.OptIn, haltSpec(n))
		if annotate != nil {
			annotate(d)
		}
		objs = append(objs, d)
	}
	env.Apply(t, objs...)
	waitComplete(t, ns, names...)
	hashes := map[string]string{}
	for _, n := range names {
		d := &appsv1.Deployment{}
		d.Namespace, d.Name = ns, n
		env.Get(t, d)
		hashes[n] = framework.TemplateHash(d)
	}
	return hashes
}

// concurrency watches the Deployments of ns and records the most that were
// mid-rollout at once: from the event where a new stamp (not in initial)
// appears until the Deployment controller reports that generation complete.
type concurrency struct {
	mu      sync.Mutex
	initial map[string]string
	since   map[string]int64 // name -> generation at which the new stamp appeared
	rolling map[string]bool
	done    map[string]bool
	peak    int
}

func watchConcurrency(t *testing.T, ns string, initial map[string]string) *concurrency {
	t.Helper()
	c := &concurrency{initial: initial, since: map[string]int64{}, rolling: map[string]bool{}, done: map[string]bool{}}
	env.WatchDeployments(t, ns, c.observe)
	return c
}

func (c *concurrency) observe(d *appsv1.Deployment) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := framework.TemplateHash(d)
	if h == c.initial[d.Name] || c.done[d.Name] {
		return
	}
	if _, ok := c.since[d.Name]; !ok {
		c.since[d.Name] = d.Generation
	}
	s, want := d.Status, *d.Spec.Replicas
	finished := s.ObservedGeneration >= c.since[d.Name] && s.UpdatedReplicas == want && s.AvailableReplicas == want && s.Replicas == want
	if finished {
		delete(c.rolling, d.Name)
		c.done[d.Name] = true
		return
	}
	c.rolling[d.Name] = true
	c.peak = max(c.peak, len(c.rolling))
}

func (c *concurrency) stats() (peak, done int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.peak, len(c.done)
}

// startedRollouts is configstamp_rollouts_started_total for Deployments.
func startedRollouts(t *testing.T, l *framework.Lane) float64 {
	t.Helper()
	v, err := l.Metrics("configstamp_rollouts_started_total", `kind="Deployment"`)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%02d", prefix, i)
	}
	return out
}

// burstDebounce is TestBurstOfChangesGivesOneRollout's debounce: five API
// writes must fit well within it on a loaded machine.
const burstDebounce = 5 * time.Second

func TestBurstOfChangesGivesOneRollout(t *testing.T) {
	t.Parallel()
	l := lane(t, "--debounce="+burstDebounce.String())
	ns := l.Namespace(t, "burst", nil)
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "a")
	spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "s"}}}}
	spec.Containers[0].Env = []corev1.EnvVar{{Name: "B", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "b"}, Key: "k"}}}}
	dep := framework.Deployment(ns, "app", framework.OptIn, spec)
	a := framework.ConfigMap(ns, "a", map[string]string{"v": "0"}, nil)
	b := framework.ConfigMap(ns, "b", map[string]string{"k": "0"}, nil)
	s := framework.Secret(ns, "s", map[string]string{"p": "0"})
	env.Apply(t, a, b, s, dep)
	waitComplete(t, ns, "app")
	env.Get(t, dep)
	h0 := framework.TemplateHash(dep)

	// Five changes to three sources, within one second.
	began := time.Now()
	for i, obj := range []client.Object{a, b, s, a, b} {
		switch o := obj.(type) {
		case *corev1.ConfigMap:
			for k := range o.Data {
				o.Data[k] = fmt.Sprint(i + 1)
			}
		case *corev1.Secret:
			o.Data["p"] = []byte(fmt.Sprint(i + 1))
		}
		obj.SetResourceVersion("")
		if err := env.Client.Update(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
	// Within the lane's debounce, with room for the controller's lag: on a
	// loaded machine five updates took 1.009 s once, and 1.98 s in make test
	// beside the suite's other lanes.
	if elapsed := time.Since(began); elapsed > burstDebounce-1500*time.Millisecond {
		t.Fatalf("the five changes took %v, not well within the %v debounce this test is about", elapsed, burstDebounce)
	}
	env.WaitTemplateHash(t, dep, h0)
	waitComplete(t, ns, "app")
	l.WaitIdle(t, map[string]float64{"deployment": 0})
	if n := replicaSets(t, ns, "app"); n != 2 {
		t.Fatalf("ReplicaSets after five changes within a second: %d, want 2 (exactly one new)", n)
	}
	if d, err := l.Metrics("configstamp_debounced_changes_total"); err != nil || d < 1 {
		t.Fatalf("debounced changes metric = %v (%v), want at least 1", d, err)
	}
}

func TestBudgetBoundsConcurrentRollouts(t *testing.T) {
	t.Parallel()
	l := lane(t)
	ns := l.Namespace(t, "budget", nil)
	wave := names("app", 30)
	initial := createWave(t, ns, wave, nil)
	c := watchConcurrency(t, ns, initial)
	started := startedRollouts(t, l)
	since := map[string]float64{"deployment": l.ReconcileCounts(t)["deployment"]}

	began := time.Now()
	env.Apply(t, framework.ConfigMap(ns, "shared", map[string]string{"mode": "two"}, nil))
	framework.Eventually(t, 5*time.Minute, func() (bool, string) {
		peak, done := c.stats()
		return done == len(wave), fmt.Sprintf("%d of %d rolled out, peak %d", done, len(wave), peak)
	})
	stampedOnce(t, l, ns, wave, started, since)
	peak, _ := c.stats()
	t.Logf("30-workload wave with budget 5: %v, peak concurrent rollouts %d", time.Since(began).Round(time.Millisecond), peak)
	if peak > 5 {
		t.Fatalf("peak concurrent rollouts %d exceeds the budget of 5", peak)
	}
	if peak < 2 {
		t.Fatalf("peak concurrent rollouts %d: the wave ran one at a time, the budget was not used", peak)
	}
	for _, n := range wave {
		if got := replicaSets(t, ns, n); got != 2 {
			t.Errorf("%s has %d ReplicaSets, want 2 (rolled exactly once)", n, got)
		}
	}
}

// TestWaveStampsEachWorkloadOnce: a wide wave with no debounce, where the
// next reconcile of a workload can run before the watch delivers the stamp
// configstamp just wrote to it (the bench saw 10 to 16 of 100 workloads
// stamped twice before the fix): each workload is stamped once.
func TestWaveStampsEachWorkloadOnce(t *testing.T) {
	t.Parallel()
	l := lane(t, "--max-concurrent-rollouts=10", "--debounce=0")
	ns := l.Namespace(t, "once", nil)
	wave := names("app", 100)
	c := watchConcurrency(t, ns, createWave(t, ns, wave, nil))
	started := startedRollouts(t, l)
	since := map[string]float64{"deployment": l.ReconcileCounts(t)["deployment"]}
	env.Apply(t, framework.ConfigMap(ns, "shared", map[string]string{"mode": "two"}, nil))
	framework.Eventually(t, 5*time.Minute, func() (bool, string) {
		peak, done := c.stats()
		return done == len(wave), fmt.Sprintf("%d of %d rolled out, peak %d", done, len(wave), peak)
	})
	stampedOnce(t, l, ns, wave, started, since)
	if peak, _ := c.stats(); peak > 10 {
		t.Errorf("peak concurrent rollouts %d exceeds the budget of 10", peak)
	}
}

// stampedOnceHold is how long stampedOnce watches the rollouts started: past
// rollout.StaleRecheck (200 ms) and the suite's --debounce=2s.
const stampedOnceHold = 5 * time.Second

// stampedOnce checks, once configstamp is idle (since: ReconcileCounts), that
// each of the wave's workloads was stamped once for the change: one rollout
// started each (started: startedRollouts before the change) and one
// ConfigChanged event each (a repeat of an identical event counts through its
// series).
func stampedOnce(t *testing.T, l *framework.Lane, ns string, wave []string, started float64, since map[string]float64) {
	t.Helper()
	l.WaitIdle(t, since)
	// A reconcile asked to look again (rollout.StaleRecheck) waits where
	// WaitIdle cannot see it: the count must hold past that, and past the
	// suite's debounce, before the events are counted.
	for hold := time.Now().Add(stampedOnceHold); ; <-time.After(500 * time.Millisecond) {
		if got := startedRollouts(t, l) - started; got != float64(len(wave)) {
			t.Errorf("configstamp started %v rollouts for a wave of %d workloads, want one each", got, len(wave))
			break
		}
		if time.Now().After(hold) {
			break
		}
	}
	twice := 0
	for _, n := range wave {
		d := &appsv1.Deployment{}
		d.Namespace, d.Name = ns, n
		env.Get(t, d)
		if got := env.CountEvents(t, d, "ConfigChanged"); got != 1 {
			twice++
			t.Logf("%s has %d ConfigChanged events, want 1 (stamped once)", n, got)
		}
	}
	if twice > 0 {
		t.Errorf("%d of %d workloads had more than one ConfigChanged event", twice, len(wave))
	}
}

// haltTheWave runs a six-workload wave in namespace ns of a lane of its own,
// one at a time, whose third workload fails (its pods never become ready with
// the bad data): the remaining three are halted. It returns the initial
// stamps.
func haltTheWave(t *testing.T, ns string) map[string]string {
	t.Helper()
	// One slot and no debounce make the wave strictly sequential: w-0, w-1, w-2 (fails), ...
	l := lane(t, "--max-concurrent-rollouts=1", "--debounce=0")
	l.NamespaceNamed(t, ns, nil)
	short := func(d *appsv1.Deployment) {
		d.Spec.ProgressDeadlineSeconds = new(int32(4))
	}
	initial := createWave(t, ns, haltNames, short)

	env.Apply(t, framework.ConfigMap(ns, "shared", map[string]string{"mode": "bad"}, nil))
	bad := &appsv1.Deployment{}
	bad.Namespace, bad.Name = ns, haltNames[2]
	env.WaitEvent(t, bad, "RolloutFailed", "ProgressDeadlineExceeded")
	env.Get(t, bad)
	if framework.TemplateHash(bad) != haltWorkloadHash(ns, "bad") {
		t.Fatalf("the failing workload carries %s, want the precomputed %s", framework.TemplateHash(bad), haltWorkloadHash(ns, "bad"))
	}
	shared := framework.ConfigMap(ns, "shared", nil, nil)
	env.WaitEvent(t, shared, "RolloutFailed", haltNames[2])
	// The rest of the wave is halted: each says so, and keeps its only ReplicaSet.
	for _, n := range haltNames[3:] {
		d := &appsv1.Deployment{}
		d.Namespace, d.Name = ns, n
		env.WaitEvent(t, d, "RolloutHalted", "ConfigMap/shared")
	}
	l.WaitIdle(t, map[string]float64{"deployment": 0})
	for i, n := range haltNames {
		want := 1
		if i <= 2 {
			want = 2 // rolled (w-0, w-1) or tried (w-2, whose old pod keeps serving)
		}
		if got := replicaSets(t, ns, n); got != want {
			t.Errorf("after the halt %s has %d ReplicaSets, want %d", n, got, want)
		}
		d := &appsv1.Deployment{}
		d.Namespace, d.Name = ns, n
		env.Get(t, d)
		if i > 2 && framework.TemplateHash(d) != initial[n] {
			t.Errorf("halted %s was stamped anyway", n)
		}
	}
	return initial
}

// waitHaltedRoll waits until the workloads halted by haltTheWave have rolled
// the change once and returns how long until the first was stamped.
func waitHaltedRoll(t *testing.T, ns string, initial map[string]string, began time.Time) time.Duration {
	t.Helper()
	var resumed time.Duration
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		for _, n := range haltNames[3:] {
			d := &appsv1.Deployment{}
			d.Namespace, d.Name = ns, n
			env.Get(t, d)
			if framework.TemplateHash(d) != initial[n] && resumed == 0 {
				resumed = time.Since(began)
			}
			if framework.TemplateHash(d) == initial[n] || !framework.RolledOut(d) {
				return false, n + " not yet rolled"
			}
		}
		return true, ""
	})
	for _, n := range haltNames[3:] {
		if got := replicaSets(t, ns, n); got != 2 {
			t.Errorf("after the halt was lifted %s has %d ReplicaSets, want 2 (rolled once)", n, got)
		}
	}
	return resumed
}

// haltedRecheck is how often a halted workload looks again by itself
// (rollout's haltedRecheck); resumeBound is well under it: a wave that
// resumed within it was woken by the lift, not found by the recheck. It
// took 11.7 s once under make test's load in a fresh clone (.ci/run).
const (
	haltedRecheck = 30 * time.Second
	resumeBound   = 20 * time.Second
)

func TestDeletingTheFailedWorkloadResumesTheWave(t *testing.T) {
	t.Parallel()
	ns := "halt-delete"
	initial := haltTheWave(t, ns)
	began := time.Now()
	env.Kubectl(t, "", "-n", ns, "delete", "deployment", haltNames[2], "--wait=false")
	resumed := waitHaltedRoll(t, ns, initial, began)
	t.Logf("wave resumed %v after the failed workload was deleted; all %d waiting workloads rolled in %v",
		resumed.Round(time.Millisecond), len(haltNames[3:]), time.Since(began).Round(time.Millisecond))
	if resumed > resumeBound {
		t.Errorf("the wave resumed %v after the delete, want within %v (the wake, not the halted workloads' %v recheck)", resumed, resumeBound, haltedRecheck)
	}
}

func TestRemovingTheHaltedAnnotationResumesTheWave(t *testing.T) {
	t.Parallel()
	ns := "halt-unannotate"
	initial := haltTheWave(t, ns)
	began := time.Now()
	env.Kubectl(t, "", "-n", ns, "annotate", "deployment", haltNames[2], rollout.AnnotationHalted+"-")
	resumed := waitHaltedRoll(t, ns, initial, began)
	t.Logf("wave resumed %v after the halted annotation was removed; all %d waiting workloads rolled in %v",
		resumed.Round(time.Millisecond), len(haltNames[3:]), time.Since(began).Round(time.Millisecond))
	if resumed > resumeBound {
		t.Errorf("the wave resumed %v after the annotation was removed, want within %v (the wake, not the halted workloads' %v recheck)", resumed, resumeBound, haltedRecheck)
	}
	// The failed workload itself does not roll again for the same change.
	if got := replicaSets(t, ns, haltNames[2]); got != 2 {
		t.Errorf("the failed %s has %d ReplicaSets, want 2", haltNames[2], got)
	}
}

func TestFailedRolloutHaltsTheWave(t *testing.T) {
	t.Parallel()
	ns := haltNamespace
	initial := haltTheWave(t, ns)

	// A corrected change lifts the halt and completes the wave.
	env.Apply(t, framework.ConfigMap(ns, "shared", map[string]string{"mode": "fixed"}, nil))
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		for _, n := range haltNames {
			d := &appsv1.Deployment{}
			d.Namespace, d.Name = ns, n
			env.Get(t, d)
			if d.Annotations[stamp.AnnotationAppliedHash] == initial[n] || !framework.RolledOut(d) {
				return false, n + " not yet rolled to the fix"
			}
		}
		return true, ""
	})
	for i, n := range haltNames {
		want := 2 // halted ones roll once, from the original straight to the fix
		if i <= 2 {
			want = 3
		}
		if got := replicaSets(t, ns, n); got != want {
			t.Errorf("after the fix %s has %d ReplicaSets, want %d", n, got, want)
		}
	}
}

func TestKilledMidWaveRollsEachOnce(t *testing.T) {
	t.Parallel()
	l := lane(t)
	ns := l.Namespace(t, "resume", nil)
	wave := names("app", 30)
	initial := createWave(t, ns, wave, nil)
	c := watchConcurrency(t, ns, initial)

	env.Apply(t, framework.ConfigMap(ns, "shared", map[string]string{"mode": "two"}, nil))
	// Kill configstamp once the wave is under way but far from done.
	framework.Eventually(t, time.Minute, func() (bool, string) {
		peak, done := c.stats()
		return peak >= 1 && done >= 1, fmt.Sprintf("peak %d done %d", peak, done)
	})
	_, doneAtKill := c.stats()
	l.Kill()
	if doneAtKill >= len(wave) {
		t.Fatalf("the wave finished (%d) before configstamp was killed", doneAtKill)
	}
	t.Logf("killed configstamp with %d of %d workloads rolled", doneAtKill, len(wave))
	began := time.Now()
	if err := l.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 5*time.Minute, func() (bool, string) {
		_, done := c.stats()
		return done == len(wave), fmt.Sprintf("%d of %d rolled out", done, len(wave))
	})
	peak, _ := c.stats()
	t.Logf("wave resumed after restart and finished %v later; peak concurrent %d", time.Since(began).Round(time.Millisecond), peak)
	if peak > 5 {
		t.Errorf("peak concurrent rollouts %d exceeds the budget of 5", peak)
	}
	for _, n := range wave {
		if got := replicaSets(t, ns, n); got != 2 {
			t.Errorf("%s has %d ReplicaSets, want 2 (rolled exactly once across the restart)", n, got)
		}
	}
}

// A restart after the change's canary passed, mid-wave, gives the change no
// second canary: the new process finds the pass in the canary's sealed
// record. Six Deployments share the change, a budget of one stretches the
// wave; configstamp is killed as soon as the canary's pass is written and
// started again. Every workload rolls once, and only the first carries a
// canary record (before the fix: the first stamped after the restart was a
// canary again, held at one pod for a window of its own).
func TestRestartAfterTheCanaryPassedNeedsNoOther(t *testing.T) {
	t.Parallel()
	l := lane(t, "--max-concurrent-rollouts=1", "--verify-window=3s")
	ns := l.Namespace(t, "passed", nil)
	wave := names("app", 6)
	initial := createWave(t, ns, wave, nil)
	c := watchConcurrency(t, ns, initial)
	dep := func(n string) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n}}
	}

	env.Apply(t, framework.ConfigMap(ns, "shared", map[string]string{"mode": "two"}, nil))
	var canary string
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		for _, n := range wave {
			if r := state(t, dep(n)); r.Canary == rollout.CanaryPassed || r.Canary == rollout.CanaryRunning && r.State == rollout.Completed {
				canary = n
				return true, ""
			}
		}
		return false, "no canary passed yet"
	})
	l.Kill()
	_, doneAtKill := c.stats()
	if doneAtKill >= len(wave)-1 {
		t.Fatalf("the wave was as good as done (%d of %d) before configstamp was killed", doneAtKill, len(wave))
	}
	if err := l.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 3*time.Minute, func() (bool, string) {
		_, done := c.stats()
		return done == len(wave), fmt.Sprintf("%d of %d rolled out", done, len(wave))
	})
	var canaries []string
	for _, n := range wave {
		if r := state(t, dep(n)); r.Canary != rollout.NoCanary {
			canaries = append(canaries, n+" ("+string(r.Canary)+")")
		}
		if got := replicaSets(t, ns, n); got != 2 {
			t.Errorf("%s has %d ReplicaSets, want 2 (rolled once)", n, got)
		}
	}
	t.Logf("killed when %s's canary had passed, %d of %d rolled; canary records after the wave: %v", canary, doneAtKill, len(wave), canaries)
	if len(canaries) != 1 {
		t.Errorf("canary records after the restart: %v, want only %s's: the restart gave the change a second canary", canaries, canary)
	}
}

// A restart of configstamp (as a new leader) while the change's canary is
// verifying keeps the canary's window where it was: the window's end is in
// the canary's sealed record, not in the process. Three Deployments share the
// change, a budget of one; configstamp is killed half way into the canary's
// window and started again. The canary passes at the end of the window its
// record names, not a whole window after the new leader's first look, and no
// other workload of the wave starts before it passed.
func TestRestartMidCanaryKeepsItsWindow(t *testing.T) {
	t.Parallel()
	const window = 60 * time.Second
	l := lane(t, "--max-concurrent-rollouts=1", "--verify-window="+window.String())
	ns := l.Namespace(t, "mid-canary", nil)
	wave := names("app", 3)
	createWave(t, ns, wave, nil)
	dep := func(n string) *appsv1.Deployment {
		return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: n}}
	}

	changed := time.Now().Add(-time.Second) // records keep whole seconds
	env.Apply(t, framework.ConfigMap(ns, "shared", map[string]string{"mode": "two"}, nil))
	var canary string
	var until time.Time
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		for _, n := range wave {
			if r := state(t, dep(n)); r.Canary == rollout.CanaryRunning && r.State == rollout.Verifying {
				canary, until = n, r.Until
				return true, ""
			}
		}
		return false, "no canary verifying yet"
	})
	framework.Eventually(t, window, func() (bool, string) {
		return time.Until(until) <= window/2, "the canary's window is not half over"
	})
	if r := state(t, dep(canary)); r.State != rollout.Verifying || !r.Until.Equal(until) {
		t.Fatalf("%s's record %+v half way into its window: want it verifying until %v", canary, r, until)
	}
	l.Kill()
	killed := time.Now()
	if err := l.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, 2*window, func() (bool, string) {
		r := state(t, dep(canary))
		return r.State == rollout.Completed, fmt.Sprintf("%s: rollout-state %q, canary %q", canary, r.State, r.Canary)
	})
	passed := time.Now()
	t.Logf("killed %s's canary %v into its %v window; it passed %v after the window its record names ended",
		canary, (window - until.Sub(killed)).Round(100*time.Millisecond), window, passed.Sub(until).Round(100*time.Millisecond))
	// A fresh window would count from the new leader's first look, after
	// the kill: it would end half a window (30 s) or more past until.
	if late := passed.Sub(until); late > 10*time.Second {
		t.Errorf("the canary passed %v after its window's end: as late as a fresh window from the restart would end: the restart gave it one",
			late.Round(100*time.Millisecond))
	}
	// None of the rest started before the window's end; the next starts
	// after it (the pass found by the new leader lets the wave go on).
	started := 0
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		started = 0
		for _, n := range wave {
			if r := state(t, dep(n)); n != canary && r.Started.After(changed) {
				if r.Started.Before(until.Add(-time.Second)) {
					t.Fatalf("%s started its rollout at %v, before the canary's window ended at %v: the restart let the wave past a canary not yet passed",
						n, r.Started, until)
				}
				started++
			}
		}
		return started > 0, "no other workload started after the canary passed"
	})
}
