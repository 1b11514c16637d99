package kinds

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

// rolloutCounters reads configstamp's started, completed and failed counters
// of the Rollout kind.
func rolloutCounters(t *testing.T) [3]float64 {
	t.Helper()
	var out [3]float64
	for i, family := range []string{"configstamp_rollouts_started_total", "configstamp_rollouts_completed_total", "configstamp_rollouts_failed_total"} {
		out[i] = metric(t, family, `kind="Rollout"`)
	}
	return out
}

// A Rollout in an opted-in namespace is stamped at CREATE with the hash a
// Deployment with the same references gets, rolled once (its template
// patched) when the ConfigMap changes, and followed to completion from its
// status: a status that has not observed the new template, or reports it
// still progressing, does not complete it.
func TestRolloutStampedRolledAndFollowed(t *testing.T) {
	ns := env.Namespace(t, "argo", framework.OptIn)
	v1, v2 := map[string]string{"greeting": "hello"}, map[string]string{"greeting": "bonjour"}
	env.Apply(t, framework.ConfigMap(ns, "app-config", v1, nil))
	// No label of its own: the namespace opts it in.
	env.Kubectl(t, rolloutManifest(ns, "web", "app-config", 0, false), "apply", "-f", "-")

	// Stamped by the webhook in the object as created: generation 1, so no
	// later patch of the template.
	ro := get(t, rolloutObj(ns, "web"))
	h0 := framework.TemplateHash(ro)
	if want := expectedHash(ns, "app-config", v1); h0 != want {
		t.Fatalf("the created Rollout's template stamp is %q, want %q (a Deployment's)", h0, want)
	}
	if g := ro.GetGeneration(); g != 1 {
		t.Fatalf("the created Rollout is at generation %d, want 1", g)
	}
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		got := get(t, ro).GetAnnotations()[stamp.AnnotationAppliedHash]
		return got == h0, fmt.Sprintf("applied-hash %q, want the template's %q", got, h0)
	})

	// Creating it rolled nothing.
	env.Configstamp.WaitIdle(t, nil)
	get(t, ro)
	if h, g := framework.TemplateHash(ro), ro.GetGeneration(); h != h0 || g != 1 {
		t.Fatalf("once configstamp is idle the new Rollout is stamped %q at generation %d, want %q at 1", h, g, h0)
	}
	if r := rollout.Read(ro.GetAnnotations()); r.State != rollout.None {
		t.Fatalf("rollout-state %q on a Rollout configstamp never rolled", r.State)
	}
	if n := env.CountEvents(t, ro, "ConfigChanged"); n != 0 {
		t.Fatalf("%d ConfigChanged events on a new Rollout, want 0", n)
	}
	// Argo's controller reports the new Rollout healthy. (configstamp follows a
	// Rollout's status only while a rollout it started is open: no reconcile.)
	setRolloutStatus(t, ns, "web", "Healthy")
	counters := rolloutCounters(t)

	// The ConfigMap changes: the reconciler patches the template once.
	changed := time.Now()
	since := reconciles(t)
	env.Apply(t, framework.ConfigMap(ns, "app-config", v2, nil))
	h1 := env.WaitTemplateHash(t, ro, h0)
	stamped := time.Since(changed)
	if want := expectedHash(ns, "app-config", v2); h1 != want {
		t.Fatalf("after the change the template stamp is %q, want %q", h1, want)
	}
	env.WaitEvent(t, ro, "ConfigChanged", "ConfigMap/app-config")
	// Argo has not seen the new template yet: its status still says Healthy
	// for generation 1. That must not complete the rollout.
	env.Configstamp.WaitIdle(t, map[string]float64{rolloutController: since[rolloutController]})
	get(t, ro)
	r := rollout.Read(ro.GetAnnotations())
	if r.State != rollout.Rolling || !strings.Contains(r.Cause, "ConfigMap/app-config@") {
		t.Fatalf("after the change the record is %+v, want rolling, caused by ConfigMap/app-config", r)
	}
	if g, applied := ro.GetGeneration(), ro.GetAnnotations()[stamp.AnnotationAppliedHash]; g != 2 || applied != h1 {
		t.Fatalf("after the change: generation %d, applied-hash %q; want 2 and %q", g, applied, h1)
	}
	if n := metric(t, "configstamp_rollout_slots_in_use"); n != 1 {
		t.Fatalf("%v rollout slots in use while the Rollout rolls, want 1", n)
	}

	// Argo's controller sees the new template and starts the canary: still
	// rolling.
	since = reconciles(t)
	setRolloutStatus(t, ns, "web", "Progressing")
	env.Configstamp.WaitIdle(t, map[string]float64{rolloutController: since[rolloutController]})
	if r := record(t, ro); r.State != rollout.Rolling {
		t.Fatalf("with the status Progressing for generation 2 the record is %+v, want rolling", r)
	}

	// Argo's controller has rolled the new template and reports it healthy.
	since = reconciles(t)
	setRolloutStatus(t, ns, "web", "Healthy")
	waitState(t, ro, rollout.Completed)
	completed := time.Since(changed)
	env.Configstamp.WaitIdle(t, map[string]float64{rolloutController: since[rolloutController]})
	get(t, ro)
	if h, g := framework.TemplateHash(ro), ro.GetGeneration(); h != h1 || g != 2 {
		t.Errorf("after completing the Rollout is stamped %q at generation %d, want %q at 2", h, g, h1)
	}
	if n := env.CountEvents(t, ro, "ConfigChanged"); n != 1 {
		t.Errorf("%d ConfigChanged events, want 1", n)
	}
	if n := env.CountEvents(t, ro, "RolloutFailed"); n != 0 {
		t.Errorf("%d RolloutFailed events, want 0", n)
	}
	if n := metric(t, "configstamp_rollout_slots_in_use"); n != 0 {
		t.Errorf("%v rollout slots in use after the Rollout completed, want 0", n)
	}
	after := rolloutCounters(t)
	if d := [3]float64{after[0] - counters[0], after[1] - counters[1], after[2] - counters[2]}; d != [3]float64{1, 1, 0} {
		t.Errorf("Rollout rollouts started, completed, failed: +%v, want +[1 1 0]", d)
	}
	t.Logf("Rollout stamped %v after the ConfigMap change; completed %v after it (status written by the test)",
		stamped.Round(time.Millisecond), completed.Round(time.Millisecond))
}

// The wave tests run in a namespace holding the ConfigMap "shared" and three
// workloads mounting it, in wave order by priority (10, 5, 0: the reverse of
// their names): a Rollout, a Deployment and a Rollout. A fourth workload, the
// Rollout "blocker", mounts a ConfigMap of its own: rolled first, it holds the
// only slot while "shared" changes, so that the three wait together and the
// wave goes by priority from its first rollout on. (When a change finds a
// free slot, each kind's controller announces only its own kind's workloads
// to the scheduler, so the kinds race for that slot whatever the priorities.)
const (
	blockerName = "blocker"  // a Rollout mounting blocker-config, priority 0
	firstName   = "z-first"  // a Rollout, priority 10
	midName     = "m-middle" // a Deployment, priority 5
	lastName    = "a-last"   // a Rollout, priority 0
)

type wave struct {
	ns                        string
	blocker, first, mid, last client.Object
	initial                   map[string]string // template stamps before the change
}

// newWave creates the wave's objects, with "shared" holding data, waits until
// the Deployment is rolled out and writes the Rollouts' healthy status.
func newWave(t *testing.T, prefix string, data map[string]string) *wave {
	t.Helper()
	w := &wave{ns: env.Namespace(t, prefix, nil)}
	blockerData := map[string]string{"v": "1"}
	env.Apply(t, framework.ConfigMap(w.ns, "shared", data, nil), framework.ConfigMap(w.ns, "blocker-config", blockerData, nil),
		deployment(w.ns, midName, "shared", 5))
	applyRollout(t, w.ns, blockerName, "blocker-config", 0)
	applyRollout(t, w.ns, firstName, "shared", 10)
	applyRollout(t, w.ns, lastName, "shared", 0)
	w.blocker, w.first, w.last = rolloutObj(w.ns, blockerName), rolloutObj(w.ns, firstName), rolloutObj(w.ns, lastName)
	mid := &appsv1.Deployment{}
	mid.Namespace, mid.Name = w.ns, midName
	w.mid = mid
	for _, name := range []string{blockerName, firstName, lastName} {
		setRolloutStatus(t, w.ns, name, "Healthy")
	}
	waitRolledOut(t, mid)
	w.initial = map[string]string{blockerName: expectedHash(w.ns, "blocker-config", blockerData)}
	for _, obj := range w.sharing() {
		w.initial[obj.GetName()] = expectedHash(w.ns, "shared", data)
	}
	for _, obj := range w.all() {
		if h := framework.TemplateHash(get(t, obj)); h != w.initial[obj.GetName()] {
			t.Fatalf("%s was created with the stamp %q, want %q", obj.GetName(), h, w.initial[obj.GetName()])
		}
	}
	return w
}

// sharing are the workloads mounting "shared", in wave order.
func (w *wave) sharing() []client.Object { return []client.Object{w.first, w.mid, w.last} }

// all are the wave's workloads, the blocker first.
func (w *wave) all() []client.Object { return append([]client.Object{w.blocker}, w.sharing()...) }

// watch starts the wave's timeline and waits until it holds every workload's
// current version, the base every later version is judged against.
func (w *wave) watch(t *testing.T) *timeline {
	t.Helper()
	tl := watchTimeline(t, w.ns)
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		for name, h := range w.initial {
			if !tl.seen(name, h) {
				return false, "the watch has not delivered " + name
			}
		}
		return true, ""
	})
	return tl
}

// start rolls the blocker, changes "shared" to data while the blocker holds
// the only slot, waits until the three workloads sharing it wait for the slot,
// and lets the blocker complete: the first of the wave rolls.
func (w *wave) start(t *testing.T, data map[string]string) {
	t.Helper()
	env.Apply(t, framework.ConfigMap(w.ns, "blocker-config", map[string]string{"v": "2"}, nil))
	env.WaitTemplateHash(t, w.blocker, w.initial[blockerName])
	waitState(t, w.blocker, rollout.Rolling)
	env.Apply(t, framework.ConfigMap(w.ns, "shared", data, nil))
	// They are pending in the scheduler, so WaitIdle cannot be the check: the
	// scheduler's gauges are.
	w.waitWaiting(t, "while the blocker holds the only slot", w.sharing()...)
	setRolloutStatus(t, w.ns, blockerName, "Healthy")
	waitState(t, w.blocker, rollout.Completed)
}

// stamp is obj's template stamp, read live.
func (w *wave) stamp(t *testing.T, obj client.Object) string {
	t.Helper()
	return framework.TemplateHash(get(t, obj))
}

// unstamped fails the test unless each of objs still carries its initial stamp.
func (w *wave) unstamped(t *testing.T, when string, objs ...client.Object) {
	t.Helper()
	for _, obj := range objs {
		if h := w.stamp(t, obj); h != w.initial[obj.GetName()] {
			t.Fatalf("%s: %s was stamped %q", when, obj.GetName(), h)
		}
	}
}

// finish plays each workload's controller through its rollout: a Deployment
// rolls by itself, the test reports a Rollout healthy.
func (w *wave) finish(t *testing.T, obj client.Object) {
	t.Helper()
	env.WaitTemplateHash(t, obj, w.initial[obj.GetName()])
	if d, ok := obj.(*appsv1.Deployment); ok {
		waitRolledOut(t, d)
	} else {
		waitState(t, obj, rollout.Rolling)
		setRolloutStatus(t, w.ns, obj.GetName(), "Healthy")
	}
	waitState(t, obj, rollout.Completed)
}

// checkWave fails the test unless the timeline shows the wave rolled one
// workload at a time, each stamped exactly once more, and returns the order
// in which they were stamped.
func (w *wave) checkWave(t *testing.T, tl *timeline) []string {
	t.Helper()
	s := tl.summary(t)
	if s.peak != 1 {
		t.Errorf("at most %d workloads were mid-rollout at once, want 1 (--max-concurrent-rollouts=1)", s.peak)
	}
	for _, obj := range w.all() {
		if n := s.stamps[obj.GetName()]; n != 2 {
			t.Errorf("%s had %d distinct template stamps, want 2 (rolled exactly once)", obj.GetName(), n)
		}
	}
	t.Logf("wave order %v, peak concurrent rollouts %d, stamps %v", s.order, s.peak, s.stamps)
	return s.order
}

func waitRolledOut(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		return framework.RolledOut(get(t, d)), "deployment " + d.Name + " not rolled out"
	})
}

// haltedRecheck is how often configstamp's reconciler looks again at a
// workload waiting on a halted change (controllers.haltedRecheck).
const haltedRecheck = 30 * time.Second

// holdUnstamped checks every 100 ms for d that objs keep their initial stamps,
// and then that the controllers of objs reconciled meanwhile: d was long
// enough for configstamp to look at them again.
func (w *wave) holdUnstamped(t *testing.T, when string, d time.Duration, objs ...client.Object) {
	t.Helper()
	before := reconciles(t)
	for end := time.Now().Add(d); time.Now().Before(end); {
		w.unstamped(t, when, objs...)
		<-time.After(100 * time.Millisecond)
	}
	w.unstamped(t, when, objs...)
	after := reconciles(t)
	for _, obj := range objs {
		controller := rolloutController
		if _, ok := obj.(*appsv1.Deployment); ok {
			controller = "deployment"
		}
		if after[controller] <= before[controller] {
			t.Fatalf("%s: the %s controller did not reconcile in %v: the check did not outlast configstamp's recheck", when, controller, d)
		}
	}
	t.Logf("%s: %d workloads stayed unstamped for %v (reconciles: %v -> %v)", when, len(objs), d, before, after)
}

// waitWaiting polls until configstamp reports objs waiting for a slot and one
// slot in use (the scheduler has decided that they wait: no debounce or other
// timer delays them), failing the test as soon as one of objs is stamped
// meanwhile, and checks once more that none is.
func (w *wave) waitWaiting(t *testing.T, when string, objs ...client.Object) {
	t.Helper()
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		w.unstamped(t, when, objs...)
		waiting, slots := metric(t, "configstamp_rollouts_waiting"), metric(t, "configstamp_rollout_slots_in_use")
		return waiting == float64(len(objs)) && slots == 1,
			fmt.Sprintf("%v waiting, %v slots in use; want %d and 1", waiting, slots, len(objs))
	})
	w.unstamped(t, when, objs...)
}

// A Rollout holds a slot of the budget from its stamp until its status
// reports the rollout complete, as a Deployment does, and the wave goes by
// rollout-priority across kinds. The slot is held by the record on the
// Rollout: a restarted configstamp still waits for it.
func TestRolloutsTakePartInTheBudget(t *testing.T) {
	w := newWave(t, "budget", map[string]string{"mode": "one"})
	two := map[string]string{"mode": "two"}
	tl := w.watch(t)

	changed := time.Now()
	w.start(t, two)
	env.WaitTemplateHash(t, w.first, w.initial[firstName])
	waitState(t, w.first, rollout.Rolling)
	// The first Rollout holds the only slot: the other two wait, unstamped.
	w.waitWaiting(t, "while the first Rollout holds the only slot", w.mid, w.last)

	// A new configstamp process knows the slot is held from the record on the
	// Rollout alone (nothing in its memory).
	if err := env.Configstamp.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	w.waitWaiting(t, "after a restart while the first Rollout holds the only slot", w.mid, w.last)
	if r := record(t, w.first); r.State != rollout.Rolling {
		t.Fatalf("after the restart the first Rollout's record is %+v, want rolling", r)
	}

	// Argo reports the first Rollout healthy: the Deployment goes next, then
	// (once kube-controller-manager has rolled it) the last Rollout.
	for _, obj := range w.sharing() {
		w.finish(t, obj)
	}
	t.Logf("wave of a blocker and three workloads with budget 1 (a restart included) done %v after the change",
		time.Since(changed).Round(time.Millisecond))

	env.Configstamp.WaitIdle(t, nil)
	if order, want := w.checkWave(t, tl), []string{blockerName, firstName, midName, lastName}; !slices.Equal(order, want) {
		t.Errorf("the wave rolled in the order %v, want %v (the blocker, then priority 10, 5, 0)", order, want)
	}
	want := expectedHash(w.ns, "shared", two)
	for _, obj := range w.sharing() {
		if h := w.stamp(t, obj); h != want {
			t.Errorf("%s is stamped %q, want %q", obj.GetName(), h, want)
		}
	}
	for _, obj := range w.all() {
		if r := record(t, obj); r.State != rollout.Completed || r.Halted != "" {
			t.Errorf("%s: record %+v, want completed", obj.GetName(), r)
		}
		if n := env.CountEvents(t, obj, "ConfigChanged"); n != 1 {
			t.Errorf("%s: %d ConfigChanged events, want 1", obj.GetName(), n)
		}
	}
	if n := len(env.ReplicaSets(t, w.ns, midName)); n != 2 {
		t.Errorf("the Deployment has %d ReplicaSets, want 2 (one rollout)", n)
	}
	if n := metric(t, "configstamp_rollout_slots_in_use"); n != 0 {
		t.Errorf("%v rollout slots in use after the wave, want 0", n)
	}
}

// A Rollout whose status turns Degraded has failed: configstamp records it,
// says so (Warning RolloutFailed on the Rollout and the ConfigMap) and halts
// the change: the Deployment and the Rollout that would roll it next are told
// (Warning RolloutHalted) and not stamped, until the halted annotation is
// removed; then they roll, one at a time.
func TestFailedRolloutHaltsTheChange(t *testing.T) {
	w := newWave(t, "halt", map[string]string{"mode": "good"})
	tl := w.watch(t)
	shared := framework.ConfigMap(w.ns, "shared", map[string]string{"mode": "bad"}, nil)

	w.start(t, shared.Data)
	bad := env.WaitTemplateHash(t, w.first, w.initial[firstName])
	waitState(t, w.first, rollout.Rolling)
	w.waitWaiting(t, "while the first Rollout holds the only slot", w.mid, w.last)

	// Argo aborts the canary: the Rollout reports Degraded for the new template.
	since := reconciles(t)
	setRolloutStatus(t, w.ns, firstName, "Degraded")
	waitState(t, w.first, rollout.Failed)
	env.WaitEvent(t, w.first, "RolloutFailed", "Degraded")
	env.WaitEvent(t, get(t, shared), "RolloutFailed", firstName)
	// The slot is free now: what keeps the other two unstamped is the halt.
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		w.unstamped(t, "while the change is halted", w.mid, w.last)
		for _, obj := range []client.Object{w.mid, w.last} {
			if env.CountEvents(t, get(t, obj), "RolloutHalted") == 0 {
				return false, obj.GetName() + " has no RolloutHalted event"
			}
		}
		return true, ""
	})
	for _, obj := range []client.Object{w.mid, w.last} {
		env.WaitEvent(t, obj, "RolloutHalted", "ConfigMap/shared")
	}
	// The halted workloads are no longer pending: WaitIdle is the check.
	env.Configstamp.WaitIdle(t, since)
	// A halted workload asks again every haltedRecheck: watch them through
	// one such recheck (each of the two controllers reconciles again) and
	// require them to stay unstamped all along.
	w.holdUnstamped(t, "while the change is halted", haltedRecheck+2*time.Second, w.mid, w.last)
	r := record(t, w.first)
	if r.Halted == "" || r.Halted != r.Cause || !strings.Contains(r.Halted, "ConfigMap/shared@") {
		t.Fatalf("the failed Rollout's record is %+v, want halted on its cause ConfigMap/shared", r)
	}
	w.unstamped(t, "while the change is halted", w.mid, w.last)
	if n := len(env.ReplicaSets(t, w.ns, midName)); n != 1 {
		t.Fatalf("the halted Deployment has %d ReplicaSets, want 1", n)
	}
	if n := metric(t, "configstamp_halted_workloads"); n != 2 {
		t.Errorf("configstamp_halted_workloads = %v, want 2", n)
	}
	if n := metric(t, "configstamp_rollout_slots_in_use"); n != 0 {
		t.Errorf("%v rollout slots in use while the change is halted, want 0", n)
	}

	// The documented way to resume by hand: remove the annotation. The two
	// roll one at a time, in wave order: a lifted halt announces its waiters
	// with their priorities before it wakes them.
	resumed := time.Now()
	env.Kubectl(t, "", "-n", w.ns, "annotate", "rollout", firstName, rollout.AnnotationHalted+"-")
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		return w.stamp(t, w.mid) != w.initial[midName] || w.stamp(t, w.last) != w.initial[lastName], "neither waiting workload is stamped"
	})
	t.Logf("the wave resumed %v after the halted annotation was removed", time.Since(resumed).Round(time.Millisecond))
	w.finish(t, w.mid)
	w.finish(t, w.last)

	env.Configstamp.WaitIdle(t, nil)
	if order, want := w.checkWave(t, tl), []string{blockerName, firstName, midName, lastName}; !slices.Equal(order, want) {
		t.Errorf("the wave rolled in the order %v, want %v (the resumed waiters by priority: 5, then 0)", order, want)
	}
	if h := w.stamp(t, w.first); h != bad {
		t.Errorf("the failed Rollout is stamped %q, want still %q (configstamp rolls nothing back)", h, bad)
	}
	if r := record(t, w.first); r.State != rollout.Failed || r.Halted != "" {
		t.Errorf("the failed Rollout's record is %+v, want failed and no longer halted", r)
	}
	want := map[string][3]int{ // ConfigChanged, RolloutFailed, RolloutHalted
		firstName: {1, 1, 0},
		midName:   {1, 0, 1},
		lastName:  {1, 0, 1},
	}
	for _, obj := range w.sharing() {
		got := [3]int{env.CountEvents(t, obj, "ConfigChanged"), warnings(t, obj, "RolloutFailed"), warnings(t, obj, "RolloutHalted")}
		if got != want[obj.GetName()] {
			t.Errorf("%s: ConfigChanged, RolloutFailed, RolloutHalted events %v, want %v", obj.GetName(), got, want[obj.GetName()])
		}
	}
	if n := warnings(t, get(t, shared), "RolloutFailed"); n != 1 {
		t.Errorf("%d RolloutFailed events on the ConfigMap, want 1", n)
	}
	if n := len(env.ReplicaSets(t, w.ns, midName)); n != 2 {
		t.Errorf("the Deployment has %d ReplicaSets, want 2 (one rollout)", n)
	}
	if n := metric(t, "configstamp_rollout_slots_in_use"); n != 0 {
		t.Errorf("%v rollout slots in use after the wave, want 0", n)
	}
}

// TestRunsUnderTheGeneratedRole: everything above ran as configstamp's
// ServiceAccount with config/selfsigned's RBAC and the Argo component's
// generated rules (get, list, watch, patch of rollouts only), and configstamp
// was refused nothing. The log is read after the other tests' work.
func TestRunsUnderTheGeneratedRole(t *testing.T) {
	out, _ := env.Kubectl(t, "", "auth", "can-i", "--list", "--as=system:serviceaccount:"+framework.OwnNamespace+":"+serviceAccount)
	var rollouts []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "rollouts.argoproj.io") || strings.HasPrefix(line, "*.argoproj.io") {
			rollouts = append(rollouts, strings.Join(strings.Fields(line), " "))
		}
	}
	if want := []string{"rollouts.argoproj.io [] [] [get list watch patch]"}; !slices.Equal(rollouts, want) {
		t.Errorf("configstamp may do %q with Rollouts, want %q", rollouts, want)
	}
	env.Configstamp.AssertNoneRefused(t, "its role and the generated rules")
	if env.ConfigstampKubeconfig == env.Kubeconfig {
		t.Fatal("configstamp runs with the admin kubeconfig")
	}
}
