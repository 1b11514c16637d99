//go:build linux

package realnode_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/hack/images"
	"github.com/configstamp/configstamp/test/framework"
)

// TestBadChangeCostsOnePodAtTheDefaults is the run: at
// configstamp's defaults (a budget of 10, a 2 s debounce, a 30 s window),
// six Deployments and a StatefulSet of three replicas share one ConfigMap,
// and one `kubectl apply` gives it a bad value, in each of three forms: a
// value their container rejects at start, a key an env reference needs
// removed (no container can be created), and a value their container
// exits on 20 s after it became Ready. The first of the wave is the
// change's canary: exactly one pod, in all seven, is ever made with the bad
// value; the change is halted and no other workload is stamped. After the
// crash at start, a good value then rolls all seven, the canary first: no
// other is stamped before it passed, also across a restart of configstamp
// while it runs; a user's edit of a held field and their `kubectl set
// image` during the canary stand; and afterwards no other field of any
// spec but the template's stamp and the user's edits differs from what the
// user applied.
func TestBadChangeCostsOnePodAtTheDefaults(t *testing.T) {
	t.Parallel()
	for _, f := range []canaryForm{
		{name: "a crash at start", fix: true},
		{name: "a key an env reference needs is removed", o: appOptions{envKey: true},
			bad: func(ns string) *corev1.ConfigMap {
				return framework.ConfigMap(ns, "shared", map[string]string{"other": "x"}, nil)
			}},
		{name: "Ready, then it exits 20 s later", o: appOptions{probe: true, env: map[string]string{"APP_FAIL_AFTER": "20s"}}},
	} {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			canaryRun(t, f)
		})
	}
}

// canaryForm is one bad value of TestBadChangeCostsOnePodAtTheDefaults.
type canaryForm struct {
	name string
	o    appOptions
	// bad is the bad ConfigMap (default: mode "bad", which the app rejects).
	bad func(ns string) *corev1.ConfigMap
	// fix: then roll a good value, the canary first, through a restart
	// and the user's edits.
	fix bool
}

func canaryRun(t *testing.T, f canaryForm) {
	l := lane(t, defaultFlags...)
	ns := l.Namespace(t, "canary", nil)
	names := []string{"w1", "w2", "w3", "w4", "w5", "w6"}
	ds := make([]*appsv1.Deployment, len(names))
	objs := []client.Object{configMap(ns, "shared", "good")}
	for i, n := range names {
		ds[i] = deployment(ns, n, "shared", f.o)
		ds[i].Spec.Replicas = ptr.To(int32(3))
		objs = append(objs, ds[i])
	}
	sts := framework.StatefulSet(ns, "x1", framework.OptIn, appSpec("shared", f.o))
	sts.Spec.Replicas = ptr.To(int32(3))
	sts.Spec.PodManagementPolicy = appsv1.ParallelPodManagement
	objs = append(objs, sts)
	env.Apply(t, objs...)
	before := map[string]string{}
	applied := map[string]appsv1.DeploymentSpec{}
	for _, d := range ds {
		waitReady(t, d, 4*time.Minute)
		before[d.Name] = framework.TemplateHash(d)
		applied[d.Name] = *d.Spec.DeepCopy()
	}
	waitReady(t, sts, 4*time.Minute)
	before[sts.Name] = framework.TemplateHash(sts)
	appliedSts := *sts.Spec.DeepCopy()
	all := []client.Object{sts}
	for _, d := range ds {
		all = append(all, d)
	}

	// The bad value: every pod made from a template other than the one
	// running before is a pod that ran it.
	ran := map[string]bool{}
	seeBadPods := func() {
		for _, d := range all {
			for _, p := range pods(t, ns, d.GetName()) {
				if h := p.Annotations[stamp.AnnotationHash]; h != "" && h != before[d.GetName()] {
					ran[p.Name] = true
				}
			}
		}
	}
	stampedOthers := func(canary string) []string {
		var out []string
		for _, d := range all {
			env.Get(t, d)
			if d.GetName() != canary && framework.TemplateHash(d) != before[d.GetName()] {
				out = append(out, d.GetName())
			}
		}
		return out
	}
	bad := configMap(ns, "shared", "bad")
	if f.bad != nil {
		bad = f.bad(ns)
	}
	changed := time.Now()
	env.Apply(t, bad)
	var note string
	framework.Eventually(t, 3*time.Minute, func() (bool, string) {
		seeBadPods()
		if others := stampedOthers("w1"); len(others) > 0 {
			t.Fatalf("%v stamped %s after the bad change, before w1's canary was judged: the wave went on", others, since(changed))
		}
		note = failedNote(t, ds[0])
		return note != "", fmt.Sprintf("no RolloutFailed on w1 yet; record %+v; pods that ran the bad value %v", record(t, ds[0]), keys(ran))
	})
	t.Logf("w1, the canary, failed %s after the change: %s", since(changed), note)
	if rec := record(t, ds[0]); rec.State != rollout.Failed || rec.Halted == "" {
		t.Fatalf("w1's record %+v: want failed and halting", rec)
	}
	// Past the halted workloads' recheck (30 s), the debounce and a window:
	// still one pod, still nobody else stamped.
	watched := time.Now()
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		seeBadPods()
		if others := stampedOthers(""); len(others) > 1 {
			t.Fatalf("%v stamped with the bad change: the halt did not hold", others)
		}
		if len(ran) > 1 {
			t.Fatalf("%d pods ran the bad value (%v), want exactly one", len(ran), keys(ran))
		}
		return time.Since(watched) > 65*time.Second, "watching the halt"
	})
	if len(ran) != 1 {
		t.Fatalf("%d pods ran the bad value (%v), want exactly one", len(ran), keys(ran))
	}
	t.Logf("exactly one pod ran the bad value (%v); the other five Deployments and the StatefulSet were never stamped, watched %s", keys(ran), since(watched))
	if !f.fix {
		return
	}

	// A good value: the canary first, the rest after it passed.
	fixed := time.Now()
	env.Apply(t, configMap(ns, "shared", "fixed"))
	// A restart mid-canary resumes it from its sealed record: once the
	// canary holds its one new pod, configstamp is restarted.
	framework.Eventually(t, time.Minute, func() (bool, string) {
		rec := record(t, ds[0])
		return rec.Canary == rollout.CanaryRunning && rec.Hold != "" && rec.State == rollout.Rolling, fmt.Sprintf("no held canary yet; record %+v", rec)
	})
	if err := l.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Logf("configstamp restarted %s after the fix, mid-canary", since(fixed))
	// The user sets a field the canary holds, and a new image: their
	// values stand.
	env.Kubectl(t, "", "-n", ns, "patch", "deployment", "w1", "--type=merge", "-p", `{"spec":{"minReadySeconds":7}}`)
	env.Kubectl(t, "", "-n", ns, "set", "image", "deployment/w1", "app="+images.PauseRef)
	edited := applied["w1"]
	edited.Template = *edited.Template.DeepCopy()
	edited.MinReadySeconds = 7
	edited.Template.Spec.Containers[0].Image = images.PauseRef
	applied["w1"] = edited
	var passed time.Time
	framework.Eventually(t, 3*time.Minute, func() (bool, string) {
		// The others first, then the canary's record: configstamp writes
		// the pass before it stamps any other, so a stamp seen here with
		// the record still running is a wave that did not wait.
		others := stampedOthers("w1")
		rec := record(t, ds[0])
		if rec.Canary == rollout.CanaryRunning && rec.State == rollout.Rolling {
			if len(others) > 0 {
				t.Fatalf("%v stamped %s after the fix, before the canary passed (record %+v)", others, since(fixed), rec)
			}
			return false, fmt.Sprintf("the canary runs; record %+v", rec)
		}
		if rec.Canary != rollout.CanaryPassed && rec.State != rollout.Completed && rec.State != rollout.Verifying {
			return false, fmt.Sprintf("no canary yet; record %+v", rec)
		}
		passed = time.Now()
		return true, ""
	})
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		e := event(t, ds[0], controllers.ReasonCanaryPassed, fixed)
		return e != "", "no CanaryPassed event on w1"
	})
	t.Logf("the fix's canary passed %s after the fix", passed.Sub(fixed).Round(100*time.Millisecond))
	for _, d := range all {
		framework.Eventually(t, 5*time.Minute, func() (bool, string) {
			env.Get(t, d)
			if ok, why := rolledOut(d); !ok {
				return false, d.GetName() + ": " + why
			}
			rec := rollout.Read(d.GetAnnotations())
			return rec.State == rollout.Completed && rec.Hold == "", fmt.Sprintf("%s: record %+v", d.GetName(), rec)
		})
	}
	gotSts := sts.Spec.DeepCopy()
	gotSts.Template.Annotations = appliedSts.Template.Annotations
	if !equality.Semantic.DeepEqual(*gotSts, appliedSts) {
		t.Errorf("the StatefulSet's spec after the wave differs from what was applied: update strategy %+v, want %+v",
			gotSts.UpdateStrategy, appliedSts.UpdateStrategy)
	}
	for _, d := range ds {
		got := d.Spec.DeepCopy()
		got.Template.Annotations = applied[d.Name].Template.Annotations // the stamp moved, nothing else
		if want := applied[d.Name]; !equality.Semantic.DeepEqual(*got, want) {
			t.Errorf("%s's spec after the canary differs from what was applied: strategy %+v minReadySeconds %d, want %+v %d",
				d.Name, got.Strategy, got.MinReadySeconds, want.Strategy, want.MinReadySeconds)
		}
	}
	t.Logf("the fix rolled all seven in %s, the canary passing after %s; w1 kept the user's minReadySeconds and image", since(fixed), passed.Sub(fixed).Round(100*time.Millisecond))
}

// event is the message of obj's newest event of reason since from ("" when none).
func event(t *testing.T, obj client.Object, reason string, from time.Time) string {
	t.Helper()
	list := &corev1.EventList{}
	if err := env.Client.List(t.Context(), list, client.InNamespace(obj.GetNamespace())); err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		at := e.EventTime.Time
		if at.IsZero() {
			at = e.LastTimestamp.Time
		}
		if e.InvolvedObject.UID == obj.GetUID() && e.Reason == reason && !at.Before(from.Truncate(time.Second)) {
			return e.Message
		}
	}
	return ""
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
