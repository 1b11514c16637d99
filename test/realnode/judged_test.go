//go:build linux

package realnode_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

// failureForm is one way a bad value shows in the pods of a workload.
type failureForm struct {
	o appOptions
	// bad is the bad ConfigMap (default: mode "bad", which the app rejects).
	bad func(ns string) *corev1.ConfigMap
	// watch: how long after the failure the halt must still hold.
	watch time.Duration
	// fromPod bounds the failure from the creation of the first pod of the
	// change, for a form the pod's status shows no sign of (a volume that
	// cannot be mounted: the container stays ContainerCreating; the sign is
	// a FailedMount event). From the pod, not from the change: how long the
	// control plane takes to make the pod is not configstamp's (40 s once,
	// under make test's load in CI).
	fromPod time.Duration
}

// TestEveryFailureFormIsCaughtAtTheDefaults: at configstamp's defaults,
// each way a bad value shows in the new pods fails the rollout within 15 s
// of the first sign the kubelet reports (from the moment the pod exists,
// not after `kubectl rollout status` calls it complete), the change is
// halted, and the halt holds: no workload referencing the change is stamped
// after the failure, and a flapping readiness probe does not lift it. The
// failing workload, of three replicas, is the change's canary: whatever
// the form, exactly one pod ever ran the bad value.
func TestEveryFailureFormIsCaughtAtTheDefaults(t *testing.T) {
	t.Parallel()
	// Past the halted workloads' recheck (30 s) and the debounce (2 s).
	const holds = 40 * time.Second
	forms := map[string]failureForm{
		"a key an env reference needs is removed (CreateContainerConfigError)": {o: appOptions{envKey: true},
			bad: func(ns string) *corev1.ConfigMap {
				return framework.ConfigMap(ns, "shared", map[string]string{"other": "x"}, nil)
			}, watch: holds},
		"an init container rejects the value": {o: appOptions{initCheck: true}, watch: holds},
		"a key a volume's items need is removed (FailedMount)": {o: appOptions{itemsKey: true},
			bad: func(ns string) *corev1.ConfigMap {
				return framework.ConfigMap(ns, "shared", map[string]string{"other": "x"}, nil)
			}, watch: holds, fromPod: 30 * time.Second},
		"a crash at start":                            {o: appOptions{}, watch: holds},
		"Ready, then it exits 20 s later":             {o: appOptions{probe: true, env: map[string]string{"APP_FAIL_AFTER": "20s"}}, watch: holds},
		"a liveness probe fails on the value":         {o: appOptions{liveness: true, env: map[string]string{"APP_FAIL_MODE": "unready"}}, watch: holds},
		"a readiness probe flaps on the value (10 s)": {o: appOptions{probe: true, env: map[string]string{"APP_FAIL_MODE": "flap", "APP_FAIL_AFTER": "5s", "APP_FLAP": "10s"}}, watch: 90 * time.Second},
	}
	for name, form := range forms {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ns := lane(t, defaultFlags...).Namespace(t, "form", nil)
			form.o.annotations = map[string]string{rollout.AnnotationPriority: "10"}
			first := deployment(ns, "first", "shared", form.o)
			first.Spec.Replicas = ptr.To(int32(3))
			second := deployment(ns, "second", "shared", appOptions{probe: true})
			env.Apply(t, configMap(ns, "shared", "good"), first, second)
			waitReady(t, first, 2*time.Minute)
			waitReady(t, second, 2*time.Minute)
			before := framework.TemplateHash(first)

			bad := configMap(ns, "shared", "bad")
			if form.bad != nil {
				bad = form.bad(ns)
			}
			changed := time.Now()
			env.Apply(t, bad)
			var sign, failed time.Time
			var what, note string
			framework.Eventually(t, 3*time.Minute, func() (bool, string) {
				if sign.IsZero() {
					env.Get(t, first)
					if h := framework.TemplateHash(first); h != before {
						if what = firstSign(pods(t, ns, "first"), h); what != "" {
							sign = time.Now()
						}
					}
				}
				if note = failedNote(t, first); note != "" {
					failed = time.Now()
					return true, ""
				}
				return false, fmt.Sprintf("no RolloutFailed on first yet (sign %q); record %+v", what, record(t, first))
			})
			if sign.IsZero() { // the failure came before the test saw a sign: it took no longer
				sign = failed
			}
			t.Logf("first sign %s after the change (%s); RolloutFailed %s after the change, %s after the sign: %s",
				sign.Sub(changed).Round(100*time.Millisecond), what, failed.Sub(changed).Round(100*time.Millisecond),
				failed.Sub(sign).Round(100*time.Millisecond), note)
			if d := failed.Sub(sign); d > 15*time.Second {
				t.Errorf("first failed %s after the first sign, want within 15 s", d.Round(100*time.Millisecond))
			}
			if form.fromPod > 0 {
				created := firstCreated(pods(t, ns, "first"), before)
				if d := failed.Sub(created); created.IsZero() || d > form.fromPod {
					t.Errorf("first failed %s after its first new pod was created (%s), want within %v", d.Round(100*time.Millisecond),
						created.Format(time.RFC3339), form.fromPod)
				}
			}
			haltHolds(t, first, second, form.watch)
			var ran []string
			for _, p := range pods(t, ns, "first") {
				if h := p.Annotations[stamp.AnnotationHash]; h != "" && h != before {
					ran = append(ran, p.Name)
				}
			}
			if len(ran) != 1 {
				t.Errorf("%d pods ran the bad value (%v), want exactly one: the canary's", len(ran), ran)
			}
		})
	}
}

// haltHolds checks for watch that failed stays failed and halting, and
// that other, referencing the halted change, is not stamped meanwhile (at
// the default budget it may have been stamped before the failure).
func haltHolds(t *testing.T, failed, other client.Object, watch time.Duration) {
	t.Helper()
	env.Get(t, other)
	otherHash := framework.TemplateHash(other)
	from := time.Now()
	framework.Eventually(t, watch+30*time.Second, func() (bool, string) {
		if rec := record(t, failed); rec.State != rollout.Failed || rec.Halted == "" {
			t.Fatalf("%s's record %+v %s after its failure: want it failed and halting", failed.GetName(), rec, since(from))
		}
		env.Get(t, other)
		if h := framework.TemplateHash(other); h != otherHash {
			t.Fatalf("%s was stamped %s after the failure (%s -> %s): the halt did not hold", other.GetName(), since(from), otherHash, h)
		}
		return time.Since(from) > watch, "watching the halt"
	})
}

// firstSign is the first sign the kubelet reports of a failure among pods
// stamped hash, judged here apart from configstamp's code: a container that
// waits for a reason other than starting, has restarted or has ended (an
// init container's exit 0 is its success), or a pod whose containers lost
// their readiness after they started.
func firstSign(ps []corev1.Pod, hash string) string {
	for _, p := range ps {
		if p.Annotations[stamp.AnnotationHash] != hash {
			continue
		}
		for i, cs := range append(slices.Clone(p.Status.InitContainerStatuses), p.Status.ContainerStatuses...) {
			init := i < len(p.Status.InitContainerStatuses)
			switch {
			case cs.State.Waiting != nil && cs.State.Waiting.Reason != "ContainerCreating" && cs.State.Waiting.Reason != "PodInitializing":
				return fmt.Sprintf("pod %s container %s waiting: %s", p.Name, cs.Name, cs.State.Waiting.Reason)
			case cs.RestartCount > 0:
				return fmt.Sprintf("pod %s container %s restarted", p.Name, cs.Name)
			case cs.State.Terminated != nil && (!init || cs.State.Terminated.ExitCode != 0):
				return fmt.Sprintf("pod %s container %s terminated (exit code %d)", p.Name, cs.Name, cs.State.Terminated.ExitCode)
			}
		}
		for _, c := range p.Status.Conditions {
			if c.Type != corev1.ContainersReady || c.Status == corev1.ConditionTrue {
				continue
			}
			for _, cs := range p.Status.ContainerStatuses {
				if r := cs.State.Running; r != nil && c.LastTransitionTime.After(r.StartedAt.Time) {
					return fmt.Sprintf("pod %s lost its readiness", p.Name)
				}
			}
		}
	}
	return ""
}

// firstCreated is when the first pod of ps not stamped before was created
// (zero: none was). Creation times have a resolution of a second: the bound
// it times may be up to a second longer.
func firstCreated(ps []corev1.Pod, before string) time.Time {
	var first time.Time
	for _, p := range ps {
		if h := p.Annotations[stamp.AnnotationHash]; h == "" || h == before {
			continue
		}
		if c := p.CreationTimestamp.Time; first.IsZero() || c.Before(first) {
			first = c
		}
	}
	return first
}

// firstCrash is when the first container of ps ended (zero: none did).
func firstCrash(ps []corev1.Pod) time.Time {
	var first time.Time
	for _, p := range ps {
		for _, cs := range p.Status.ContainerStatuses {
			for _, end := range []*corev1.ContainerStateTerminated{cs.State.Terminated, cs.LastTerminationState.Terminated} {
				if end != nil && !end.FinishedAt.IsZero() && (first.IsZero() || end.FinishedAt.Time.Before(first)) {
					first = end.FinishedAt.Time
				}
			}
		}
	}
	return first
}

// TestCrashAfterCompletionHaltsTheRestOfTheWave: a container that crashes
// 60 s after start, past its 10 s verification window, while its change
// still rolls to other workloads (one slot: the wave goes one workload at a
// time). The first workload completed; its crash fails it then and halts
// the change, so the third workload is never stamped.
//
// second takes the value (it does not reject it) and verifies for 2 min: the
// crash must reach configstamp while second still holds the slot. With a
// 10 s window second completed 4.5 s after first's crash in a loaded run,
// before the kubelet had written it (6 s late), and third was stamped: the
// limit of a crash past the window (docs/rollout-safety.md, "After
// completion"), not what this test is about.
func TestCrashAfterCompletionHaltsTheRestOfTheWave(t *testing.T) {
	t.Parallel()
	ns := lane(t, suiteFlags...).Namespace(t, "late-crash", nil)
	with := func(window, priority string) map[string]string {
		return map[string]string{rollout.AnnotationVerifyWindow: window, rollout.AnnotationPriority: priority}
	}
	// The crash comes 60 s after each start: after first's verified
	// rollout (its pod and a 10 s window took 46 s on a loaded node,
	// ci27, when this was 20 s and the crash failed its verification
	// instead), and while the change still rolls to second, whose 2 min
	// window outlasts it (a crash after the whole wave completed fails
	// nothing).
	crashLate := map[string]string{"APP_FAIL_AFTER": "60s"}
	first := deployment(ns, "first", "shared", appOptions{probe: true, env: crashLate, annotations: with("10s", "10")})
	// second's window outlasts first's crash by more than a busy node may
	// write it late (workload.LateReadyMargin): with 60 s, the margin was
	// first's 10 s window and second's start, and a crash written ~20 s
	// late let second's slot go to third before the halt (CI, loaded).
	second := deployment(ns, "second", "shared", appOptions{probe: true, env: map[string]string{"APP_REJECT": ""}, annotations: with("2m", "5")})
	third := deployment(ns, "third", "shared", appOptions{probe: true, annotations: with("10s", "0")})
	env.Apply(t, configMap(ns, "shared", "good"), first, second, third)
	for _, d := range []*appsv1.Deployment{first, second, third} {
		waitReady(t, d, 2*time.Minute)
	}
	thirdHash := framework.TemplateHash(third)
	changed := time.Now()
	env.Apply(t, configMap(ns, "shared", "bad"))
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		rec := record(t, first)
		return rec.State == rollout.Completed, fmt.Sprintf("first's record %+v", rec)
	})
	t.Logf("first completed its verified rollout %s after the change", since(changed))

	var note string
	framework.Eventually(t, 2*time.Minute, func() (bool, string) {
		note = failedNote(t, first)
		return note != "", fmt.Sprintf("no RolloutFailed on first yet; record %+v", record(t, first))
	})
	failed := time.Now()
	crashed := firstCrash(pods(t, ns, "first"))
	if crashed.IsZero() {
		t.Fatalf("first failed (%s) but none of its containers ended: %+v", note, pods(t, ns, "first"))
	}
	t.Logf("first crashed %s after the change and failed %s after its crash: %s", crashed.Sub(changed).Round(100*time.Millisecond),
		failed.Sub(crashed).Round(100*time.Millisecond), note)
	if d := failed.Sub(crashed); d > 15*time.Second {
		t.Errorf("first failed %s after its crash, want within 15 s", d.Round(100*time.Millisecond))
	}
	if rec := record(t, first); rec.State != rollout.Failed || rec.Halted == "" {
		t.Fatalf("first's record %+v: want failed and halting", rec)
	}
	// second rolled before the crash; third waits for the slot second
	// holds and must find the change halted then. Watched until second's
	// rollout ended and past the halted recheck after it.
	framework.Eventually(t, 3*time.Minute, func() (bool, string) {
		env.Get(t, third)
		if h := framework.TemplateHash(third); h != thirdHash {
			// Seen now; its record says when it was stamped: before first's
			// failure (the crash reached configstamp too late) or after it
			// (a halt that did not hold).
			t.Fatalf("third was stamped at %s after the change (seen %s after it; first's failure seen %s after it) (%s -> %s): the wave went on past a crash after completion",
				rollout.Read(third.GetAnnotations()).Started.Sub(changed).Round(time.Second), since(changed), failed.Sub(changed).Round(100*time.Millisecond), thirdHash, h)
		}
		rec := record(t, second)
		return !rec.Open() && time.Since(failed) > 40*time.Second, fmt.Sprintf("second's record %+v", rec)
	})
	if n := env.CountEvents(t, third, controllers.ReasonConfigChanged); n != 0 {
		t.Fatalf("third has %d ConfigChanged events", n)
	}
}
