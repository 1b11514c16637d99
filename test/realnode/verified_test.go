//go:build linux

package realnode_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers"
	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/test/framework"
)

// untouched is how long, after a bad change, the workloads behind the failed
// one are watched for a stamp or a pod change: past the verification window
// (30 s), the halted workloads' recheck (30 s) and the debounce (0), and long
// enough for the kubelet to rewrite a mounted file in a running pod (at most
// 1.5 × kubeletSync after the change).
const untouched = 2 * time.Minute

// TestBadChangeStopsAtTheFirstWorkload is the scenario of a bad shared
// change whose container starts, then crashes on the value (no readiness
// probe: `kubectl rollout status` calls such a rollout complete within a
// second): the first workload of the wave fails its verification and is
// halted; the others are never stamped, their running pods untouched, the
// pinned one keeps its files while the kubelet rewrites the unpinned one's;
// the fix rolls all three and every new pod runs it.
func TestBadChangeStopsAtTheFirstWorkload(t *testing.T) {
	t.Parallel()
	ns := lane(t, suiteFlags...).Namespace(t, "wave", nil)
	pinned := map[string]string{pin.AnnotationPin: "true"}
	a := deployment(ns, "a", "shared", appOptions{annotations: map[string]string{pin.AnnotationPin: "true", rollout.AnnotationPriority: "10"}})
	b := deployment(ns, "b", "shared", appOptions{annotations: pinned})
	c := deployment(ns, "c", "shared", appOptions{})
	env.Apply(t, configMap(ns, "shared", "good"), a, b, c)
	for _, d := range []*appsv1.Deployment{a, b, c} {
		waitReady(t, d, 2*time.Minute)
	}
	before := map[string]string{}
	podsBefore := map[string]corev1.Pod{}
	for _, d := range []*appsv1.Deployment{a, b, c} {
		before[d.Name] = framework.TemplateHash(d)
		ps := pods(t, ns, d.Name)
		if len(ps) != 1 {
			t.Fatalf("%s runs %d pods, want 1", d.Name, len(ps))
		}
		podsBefore[d.Name] = ps[0]
	}

	changed := time.Now()
	env.Apply(t, configMap(ns, "shared", "bad"))
	env.WaitTemplateHash(t, a, before["a"])
	t.Logf("a stamped %s after the change", since(changed))

	// a fails inside its window, naming the pod, the container, the exit
	// code and the restarts, and is halted.
	var note string
	framework.Eventually(t, time.Minute, func() (bool, string) {
		for _, d := range []*appsv1.Deployment{b, c} {
			env.Get(t, d)
			if h := framework.TemplateHash(d); h != before[d.Name] {
				t.Fatalf("%s was stamped %s after the bad change, before a failed: the wave went on (%s -> %s)", d.Name, since(changed), before[d.Name], h)
			}
		}
		note = failedNote(t, a)
		return note != "", "no RolloutFailed event on a yet; record " + fmt.Sprintf("%+v", record(t, a))
	})
	halted := since(changed)
	for _, want := range []string{"it failed verification", "pod a-", "container app", "exit code 1"} {
		if !strings.Contains(note, want) {
			t.Errorf("RolloutFailed on a says %q; want it to name %q", note, want)
		}
	}
	if rec := record(t, a); rec.State != rollout.Failed || rec.Halted == "" {
		t.Fatalf("a's record %+v: want failed and halted", rec)
	}
	var aRestarts int32
	for _, p := range pods(t, ns, "a") {
		aRestarts += restarts(p)
	}
	t.Logf("a failed and was halted %s after the change (restarts of its new pod so far: %d): %s", halted, aRestarts, note)

	// b and c: never stamped, their pods untouched; b (pinned) keeps its
	// file, c's file is rewritten by the kubelet.
	var rewritten time.Duration
	var unread, readB int // b's file: failed reads in a row, reads that succeeded
	framework.Eventually(t, untouched+30*time.Second, func() (bool, string) {
		for _, d := range []*appsv1.Deployment{b, c} {
			env.Get(t, d)
			if h := framework.TemplateHash(d); h != before[d.Name] {
				t.Fatalf("%s was stamped %s after the bad change (%s -> %s): the halt did not hold", d.Name, since(changed), before[d.Name], h)
			}
			ps := pods(t, ns, d.Name)
			if len(ps) != 1 || ps[0].UID != podsBefore[d.Name].UID || restarts(ps[0]) != 0 {
				t.Fatalf("%s's pods changed %s after the bad change: %d pods, want the one running before (%s) with no restart",
					d.Name, since(changed), len(ps), podsBefore[d.Name].Name)
			}
		}
		// A read that fails (a GET timed out on the loaded node) says nothing
		// of the file: only five in a row fail the test; a read of another
		// value fails it at once, and the watch needs reads that succeeded.
		switch v, err := podGet(podsBefore["b"], "/files-now"); {
		case err != nil:
			if unread++; unread == 5 {
				t.Fatalf("pinned b's mounted file: 5 reads in a row failed, the last: %v", err)
			}
		case v.Files["/config/mode"] != "good":
			t.Fatalf("pinned b's mounted file: %v, want it to stay %q", v.Files, "good")
		default:
			unread, readB = 0, readB+1
		}
		if rewritten == 0 {
			if v, err := podGet(podsBefore["c"], "/files-now"); err == nil && v.Files["/config/mode"] == "bad" {
				rewritten = time.Since(changed)
			}
		}
		return time.Since(changed) > untouched && rewritten > 0 && readB > 0,
			fmt.Sprintf("watching b and c (c's file rewritten after %v; b's read %d times)", rewritten, readB)
	})
	t.Logf("b and c untouched for %v; the kubelet rewrote unpinned c's mounted file %s after the change; pinned b's stayed old",
		untouched, rewritten.Round(time.Second))

	// The fix rolls all three, and every new pod read it at its start.
	fixed := time.Now()
	env.Apply(t, configMap(ns, "shared", "fixed"))
	for _, d := range []*appsv1.Deployment{a, b, c} {
		framework.Eventually(t, 4*time.Minute, func() (bool, string) {
			env.Get(t, d)
			ok, why := rolledOut(d)
			if !ok {
				return false, d.Name + ": " + why
			}
			ps := pods(t, ns, d.Name)
			for _, p := range ps {
				v, err := podGet(p, "/config")
				if err != nil || v.Files["/config/mode"] != "fixed" || v.Rejected {
					return false, fmt.Sprintf("%s's pod %s read %v at its start (err %v)", d.Name, p.Name, v.Files, err)
				}
			}
			return len(ps) == 1, fmt.Sprintf("%s runs %d pods", d.Name, len(ps))
		})
	}
	t.Logf("the fix rolled a, b and c in %s; every new pod read mode=fixed at its start", since(fixed))
}

// TestFailuresAfterReady: a container that becomes Ready and exits 10 s
// later, and a readiness probe that passes and fails 5 s later, each fail
// their rollout inside the window and halt the change: the second workload
// referencing it is never stamped.
func TestFailuresAfterReady(t *testing.T) {
	t.Parallel()
	for name, o := range map[string]appOptions{
		"exits 10s after Ready":  {probe: true, env: map[string]string{"APP_FAIL_AFTER": "10s"}},
		"unready 5s after Ready": {probe: true, env: map[string]string{"APP_FAIL_MODE": "unready", "APP_FAIL_AFTER": "5s"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel() // a configstamp each: the two run side by side
			ns := lane(t, suiteFlags...).Namespace(t, "after-ready", nil)
			o.annotations = map[string]string{rollout.AnnotationPriority: "10"}
			first := deployment(ns, "first", "shared", o)
			second := deployment(ns, "second", "shared", appOptions{probe: true})
			env.Apply(t, configMap(ns, "shared", "good"), first, second)
			waitReady(t, first, 2*time.Minute)
			waitReady(t, second, 2*time.Minute)
			secondHash := framework.TemplateHash(second)
			changed := time.Now()
			env.Apply(t, configMap(ns, "shared", "bad"))
			var note string
			framework.Eventually(t, 90*time.Second, func() (bool, string) {
				note = failedNote(t, first)
				return note != "", fmt.Sprintf("no RolloutFailed on first; record %+v", record(t, first))
			})
			t.Logf("first failed %s after the change: %s", since(changed), note)
			staysUnstamped(t, second, secondHash)
		})
	}
}

// TestGoodChangeIsVerifiedThenLeftAlone: a good change completes after its
// window (no false failure), holding its slot meanwhile; a scale-up and a
// deleted pod after the window fail nothing.
func TestGoodChangeIsVerifiedThenLeftAlone(t *testing.T) {
	t.Parallel()
	l := lane(t, suiteFlags...)
	ns := l.Namespace(t, "good", nil)
	d := deployment(ns, "app", "shared", appOptions{probe: true})
	env.Apply(t, configMap(ns, "shared", "good"), d)
	waitReady(t, d, 2*time.Minute)
	old := framework.TemplateHash(d)
	env.Apply(t, configMap(ns, "shared", "better"))
	env.WaitTemplateHash(t, d, old)
	stamped := time.Now()
	framework.Eventually(t, time.Minute, func() (bool, string) {
		rec := record(t, d)
		return rec.State == rollout.Verifying, fmt.Sprintf("record %+v", rec)
	})
	if n := slotsInUse(t, l); n != 1 {
		t.Errorf("slots in use while verifying: %v, want 1", n)
	}
	framework.Eventually(t, 90*time.Second, func() (bool, string) {
		rec := record(t, d)
		return rec.State == rollout.Completed, fmt.Sprintf("record %+v", rec)
	})
	completed := time.Since(stamped)
	if completed < 25*time.Second {
		t.Errorf("completed %s after the stamp: the 30 s verification window was not kept", completed.Round(time.Second))
	}
	t.Logf("good change: completed %s after the stamp (window 30 s)", completed.Round(time.Second))
	if n := env.CountEvents(t, d, controllers.ReasonRolloutFailed); n != 0 {
		t.Fatalf("%d RolloutFailed events on a good change", n)
	}

	// After the window: a scale-up and a deleted pod fail nothing.
	env.Kubectl(t, "", "-n", ns, "scale", "deployment/app", "--replicas=2")
	ps := pods(t, ns, "app")
	if err := env.Client.Delete(t.Context(), &ps[0]); err != nil {
		t.Fatal(err)
	}
	waitReady(t, d, 2*time.Minute)
	quiet := time.Now()
	framework.Eventually(t, time.Minute, func() (bool, string) {
		if n := env.CountEvents(t, d, controllers.ReasonRolloutFailed); n != 0 {
			t.Fatalf("RolloutFailed after the window (scale-up, deleted pod)")
		}
		if rec := record(t, d); rec.State != rollout.Completed {
			t.Fatalf("record %+v after the window, want completed", rec)
		}
		return time.Since(quiet) > 10*time.Second, "watching"
	})
}

// TestStatefulSetAndDaemonSetCrash: the crash on a bad value fails a
// StatefulSet's and a DaemonSet's rollout inside the window too.
func TestStatefulSetAndDaemonSetCrash(t *testing.T) {
	t.Parallel()
	ns := lane(t, suiteFlags...).Namespace(t, "kinds", nil)
	sts := framework.StatefulSet(ns, "sts", framework.OptIn, appSpec("shared", appOptions{}))
	ds := framework.DaemonSet(ns, "ds", framework.OptIn, appSpec("shared", appOptions{}))
	env.Apply(t, configMap(ns, "shared", "good"), sts, ds)
	waitReady(t, sts, 2*time.Minute)
	waitReady(t, ds, 2*time.Minute)
	env.Apply(t, configMap(ns, "shared", "bad"))
	// One slot: one of them rolls first and fails; the change is halted, so
	// the other is never stamped.
	var failed, other client.Object
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		for _, pair := range [][2]client.Object{{sts, ds}, {ds, sts}} {
			if note := failedNote(t, pair[0]); note != "" {
				t.Logf("%s failed: %s", pair[0].GetName(), note)
				failed, other = pair[0], pair[1]
				return true, ""
			}
		}
		return false, fmt.Sprintf("no RolloutFailed yet (sts %+v, ds %+v)", record(t, sts), record(t, ds))
	})
	if rec := record(t, failed); rec.State != rollout.Failed || rec.Halted == "" {
		t.Fatalf("%s's record %+v: want failed and halted", failed.GetName(), rec)
	}
	if rec := record(t, other); rec.State != rollout.None {
		t.Fatalf("%s's record %+v: it must not have rolled the halted change", other.GetName(), rec)
	}
}

// failedNote is the note of obj's RolloutFailed event, "" while there is none.
func failedNote(t *testing.T, obj client.Object) string {
	t.Helper()
	env.Get(t, obj)
	list := &corev1.EventList{}
	if err := env.Client.List(t.Context(), list, client.InNamespace(obj.GetNamespace())); err != nil {
		t.Fatal(err)
	}
	for _, e := range list.Items {
		if e.InvolvedObject.UID == obj.GetUID() && e.Reason == controllers.ReasonRolloutFailed {
			return e.Message
		}
	}
	return ""
}

func slotsInUse(t *testing.T, l *framework.Lane) float64 {
	t.Helper()
	v, err := l.Metrics("configstamp_rollout_slots_in_use")
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func since(t time.Time) string { return time.Since(t).Round(100 * time.Millisecond).String() }

// TestUndoReturnsToTheLastVerifiedRevision: with configstamp.io/on-failure:
// undo, the failed pinned workload runs the files of its last revision that
// passed verification again (read by its new container at its start) — not
// those of a change that was superseded while it rolled and never passed —
// its change stays halted, and the other workload referencing the change is
// never stamped with it.
func TestUndoReturnsToTheLastVerifiedRevision(t *testing.T) {
	t.Parallel()
	ns := lane(t, suiteFlags...).Namespace(t, "undo", nil)
	// A 10 s window: the verified revision the undo returns to is reached sooner.
	u := deployment(ns, "u", "shared", appOptions{annotations: map[string]string{
		pin.AnnotationPin: "true", rollout.AnnotationOnFailure: "undo", rollout.AnnotationPriority: "10", rollout.AnnotationVerifyWindow: "10s"}})
	// Three replicas: its canary is held at one new pod, and its rollout
	// paused when that pod fails; the undo must resume it.
	u.Spec.Replicas = ptr.To[int32](3)
	v := deployment(ns, "v", "shared", appOptions{annotations: map[string]string{pin.AnnotationPin: "true", rollout.AnnotationVerifyWindow: "10s"}})
	// e, on a ConfigMap of its own, asks for undo too; its user edits its
	// env after its verified rollout (below).
	e := deployment(ns, "e", "own", appOptions{annotations: map[string]string{
		pin.AnnotationPin: "true", rollout.AnnotationOnFailure: "undo", rollout.AnnotationVerifyWindow: "10s"}})
	env.Apply(t, configMap(ns, "shared", "good"), configMap(ns, "own", "good"), u, v, e)
	for _, d := range []*appsv1.Deployment{u, v, e} {
		waitReady(t, d, 2*time.Minute)
	}

	// "better" passes verification on all three: u's and e's last verified revision.
	env.Apply(t, configMap(ns, "shared", "better"), configMap(ns, "own", "better"))
	for _, d := range []*appsv1.Deployment{u, v, e} {
		framework.Eventually(t, 2*time.Minute, func() (bool, string) {
			rec := record(t, d)
			return rec.State == rollout.Completed && rec.Verified != "", fmt.Sprintf("%s's record %+v", d.Name, rec)
		})
	}
	vHash := framework.TemplateHash(v)
	verified := rollout.ParseVerified(record(t, u).Verified).Stamp // events name the stamp
	editedAfterVerified(t, e)

	// "interim" is stamped on u and superseded by "bad" while it rolls: it
	// never passes. "bad" crashes at start and fails.
	env.Get(t, u)
	betterHash := framework.TemplateHash(u)
	env.Apply(t, configMap(ns, "shared", "interim"))
	env.WaitTemplateHash(t, u, betterHash)
	changed := time.Now()
	env.Apply(t, configMap(ns, "shared", "bad"))
	env.WaitEvent(t, u, controllers.ReasonRolloutUndone, "returned to its revision", verified)
	undone := since(changed)
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		env.Get(t, u)
		if ok, why := rolledOut(u); !ok {
			return false, why
		}
		ps := pods(t, ns, "u")
		for _, p := range ps {
			got, err := podGet(p, "/config")
			if err != nil || got.Files["/config/mode"] != "better" || got.Rejected {
				return false, fmt.Sprintf("pod %s read %v at its start (err %v)", p.Name, got.Files, err)
			}
		}
		return len(ps) == 3 && !u.Spec.Paused, fmt.Sprintf("%d pods, paused %v", len(ps), u.Spec.Paused)
	})
	t.Logf("u failed and was undone %s after the change; it served its last verified config (mode=better, not the superseded interim) %s after the change",
		undone, since(changed))
	// The undo's own rollout is followed and verified like any other, the
	// change's halt held all along; then the record is the failure again.
	if rec := record(t, u); rec.Halted == "" {
		t.Fatalf("u's record %+v: the halt must stay while the undo rolls", rec)
	}
	env.WaitEvent(t, u, controllers.ReasonUndoVerified, "stayed healthy", verified)
	t.Logf("the undo's rollout was verified %s after the change", since(changed))
	if rec := record(t, u); rec.State != rollout.Failed || rec.Halted == "" || rec.Undo != "" {
		t.Fatalf("u's record %+v: the halt must stay after the undo", rec)
	}
	staysUnstamped(t, v, vHash)
	undoSkipsAnUnverifiedEdit(t, e)
}

// editedAfterVerified edits e's env as its user would (kubectl set env)
// after its verified rollout, waits until that revision rolled out, and
// applies the bad value to e's own ConfigMap: a revision of the verified
// stamp that configstamp never verified, then a change that fails.
func editedAfterVerified(t *testing.T, e *appsv1.Deployment) {
	t.Helper()
	env.Kubectl(t, "", "-n", e.Namespace, "set", "env", "deployment/"+e.Name, "APP_VALUE_EDIT=1")
	waitReady(t, e, 2*time.Minute)
	env.Apply(t, configMap(e.Namespace, "own", "bad"))
}

// undoSkipsAnUnverifiedEdit checks e, whose bad change failed after its
// user's edit (editedAfterVerified): the undo returns only to the template
// that passed verification, whole, and that one lacks the edit, which the
// undo never overwrites: UndoImpossible, no RolloutUndone, the edit kept.
// Before, the stamp alone named the verified revision, and the undo
// returned to the edited one, never verified.
func undoSkipsAnUnverifiedEdit(t *testing.T, e *appsv1.Deployment) {
	t.Helper()
	undoRefusedOverAnEdit(t, e, "1", "differs from revision")
}

// undoRefusedOverAnEdit checks w, whose user set APP_VALUE_EDIT=value and
// whose rollout then failed: an UndoImpossible event saying why (fragment),
// no RolloutUndone, the edit still in its template, its failure halting.
func undoRefusedOverAnEdit(t *testing.T, w *appsv1.Deployment, value, fragment string) {
	t.Helper()
	env.WaitEvent(t, w, controllers.ReasonUndoImpossible, fragment)
	if n := env.CountEvents(t, w, controllers.ReasonRolloutUndone); n != 0 {
		t.Fatalf("%s has %d RolloutUndone events: the undo returned over the user's edit", w.Name, n)
	}
	env.Get(t, w)
	found := false
	for _, e := range w.Spec.Template.Spec.Containers[0].Env {
		found = found || (e.Name == "APP_VALUE_EDIT" && e.Value == value)
	}
	if rec := record(t, w); !found || rec.State != rollout.Failed || rec.Halted == "" {
		t.Fatalf("%s: edit kept %v (env %+v), record %+v; want the edit kept and the failure halting", w.Name, found, w.Spec.Template.Spec.Containers[0].Env, rec)
	}
}

// staysUnstamped checks, once another workload's rollout of the change
// failed, that obj keeps its stamp hash: the slot is free then, so a wave
// that ignored the halt would stamp it at once; it is watched past the
// halted workloads' recheck (30 s) too.
func staysUnstamped(t *testing.T, obj client.Object, hash string) {
	t.Helper()
	from := time.Now()
	framework.Eventually(t, time.Minute, func() (bool, string) {
		env.Get(t, obj)
		if h := framework.TemplateHash(obj); h != hash {
			t.Fatalf("%s was stamped with the halted change (%s -> %s): the halt did not hold", obj.GetName(), hash, h)
		}
		return time.Since(from) > 35*time.Second, "watching " + obj.GetName()
	})
}

// TestUndoNeverOverwritesAnEdit: an edit of the pod template made while a
// bad change rolls (kubectl set env) survives the failure: configstamp
// does not undo over it, says so (UndoImpossible), and keeps the halt.
func TestUndoNeverOverwritesAnEdit(t *testing.T) {
	t.Parallel()
	ns := lane(t, suiteFlags...).Namespace(t, "undo-edit", nil)
	// The bad value exits 8 s after start: inside a 20 s window even when a
	// loaded node reports readiness late.
	w := deployment(ns, "w", "shared", appOptions{probe: true, env: map[string]string{"APP_FAIL_AFTER": "8s"},
		annotations: map[string]string{pin.AnnotationPin: "true", rollout.AnnotationOnFailure: "undo", rollout.AnnotationVerifyWindow: "20s"}})
	env.Apply(t, configMap(ns, "shared", "good"), w)
	waitReady(t, w, 2*time.Minute)
	env.Apply(t, configMap(ns, "shared", "better"))
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		rec := record(t, w)
		return rec.State == rollout.Completed && rec.Verified != "", fmt.Sprintf("record %+v", rec)
	})
	env.Get(t, w)
	betterHash := framework.TemplateHash(w)
	env.Apply(t, configMap(ns, "shared", "bad"))
	env.WaitTemplateHash(t, w, betterHash)
	env.Kubectl(t, "", "-n", ns, "set", "env", "deployment/w", "APP_VALUE_EDIT=kept")
	undoRefusedOverAnEdit(t, w, "kept", "never overwrites an edit")
}
