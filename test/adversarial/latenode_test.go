package adversarial

import (
	"fmt"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/test/framework"
)

// A kubelet on a busy node writes what it saw late: on the real-node tests a
// crash reached the API 23 s after it happened, and the Ready before it 10 s
// after. In these tests kwok holds the pods of the bad change and the test
// writes what such a kubelet would: a Ready whose transition time is lag
// before its write, then, crashAfter after that write (well inside the
// window counted from the write, well past the window counted from the
// transition), the crash.
const (
	lateCanaryNS = "adv-late-canary"
	lateHaltNS   = "adv-late-halt"
	lag          = 25 * time.Second
	crashAfter   = 15 * time.Second
	// window: configstamp's default --verify-window (kwok suites run
	// without one: framework.Lane).
	window = 30 * time.Second
)

// lateFlags are the suite's flags with configstamp's default window and
// debounce: with no debounce, second may ask for the change before first is
// announced, and be the change's canary (the wave's order needs the quiet
// window to be known).
func lateFlags(extra ...string) []string {
	return append(append(slices.Clone(suiteFlags), "--verify-window="+window.String(), "--debounce=2s"), extra...)
}

// lateHeld are the stamps of the bad change in the two namespaces, whose
// pods kwok holds (TestMain).
func lateHeld() []string {
	return []string{waveHashIn(lateCanaryNS, "first", "bad"), waveHashIn(lateHaltNS, "first", "bad")}
}

// lateWave makes the wave of ns (first, priority 10, with replicas; second,
// priority 5, one replica) on the shared ConfigMap's good value, and waits
// until both rolled out.
func lateWave(t *testing.T, ns string, replicas int32) {
	t.Helper()
	objs := []client.Object{sharedIn(ns, "good", "x")}
	for i, n := range wave[:2] {
		objs = append(objs, framework.ConfigMap(ns, "own-"+n, map[string]string{"v": n}, nil))
		d := framework.Deployment(ns, n, framework.OptIn, waveSpec(n))
		d.Annotations = map[string]string{rollout.AnnotationPriority: fmt.Sprint(10 - 5*i)}
		if n == "first" {
			d.Spec.Replicas = ptr.To(replicas)
		}
		objs = append(objs, d)
	}
	env.Apply(t, objs...)
	waitComplete(t, ns, wave[:2]...)
}

// heldPod waits for the one pod of first in ns stamped with the bad change.
func heldPod(t *testing.T, ns string) string {
	t.Helper()
	var name string
	framework.Eventually(t, time.Minute, func() (bool, string) {
		pods := env.PodsStamped(t, ns, "first", waveHashIn(ns, "first", "bad"))
		if len(pods) == 0 {
			return false, "no pod of first's bad change yet"
		}
		name = pods[0].Name
		return true, ""
	})
	return name
}

// kubeletWrites writes, as the node's kubelet, the status of pod name in ns
// after restarts restarts (each a 10 s run): Running, and Ready since lag
// before the write; or, crashed, its container in CrashLoopBackOff after
// one more. It returns the time of the write.
func kubeletWrites(t *testing.T, ns, name string, restarts int32, crashed bool) time.Time {
	t.Helper()
	var written time.Time
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		p := &corev1.Pod{}
		if err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, p); err != nil {
			return false, err.Error()
		}
		now := time.Now()
		ready := metav1.NewTime(now.Add(-lag))
		cs := corev1.ContainerStatus{Name: "app", Image: p.Spec.Containers[0].Image, Ready: true, RestartCount: restarts,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(ready.Add(-time.Second))}}}
		if restarts > 0 {
			cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error",
				StartedAt: metav1.NewTime(ready.Add(-12 * time.Second)), FinishedAt: metav1.NewTime(ready.Add(-2 * time.Second))}
		}
		status := corev1.ConditionTrue
		if crashed {
			status, ready = corev1.ConditionFalse, metav1.NewTime(now)
			cs.Ready, cs.RestartCount = false, restarts+1
			cs.LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error",
				StartedAt: metav1.NewTime(now.Add(-10 * time.Second)), FinishedAt: ready}
			cs.State = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff", Message: "back-off 10s restarting failed container=app"}}
		}
		p.Status.Phase = corev1.PodRunning
		p.Status.StartTime = &metav1.Time{Time: now.Add(-time.Minute)}
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-time.Minute))},
			{Type: corev1.PodReady, Status: status, LastTransitionTime: ready}, {Type: corev1.ContainersReady, Status: status, LastTransitionTime: ready}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{cs}
		if err := env.Client.Status().Update(t.Context(), p); err != nil {
			return false, err.Error()
		}
		written = time.Now()
		return true, ""
	})
	return written
}

// staysHalted checks, until until, that first's record in ns still fails
// and halts the change (and, with canary, that its canary never passed) and
// that second carries only its first stamp.
func staysHalted(t *testing.T, ns string, s *stamps, until time.Time, what string, canary bool) {
	t.Helper()
	for time.Now().Before(until) {
		r := rollout.Read(deployment(t, ns, "first").Annotations)
		if canary && r.Canary == rollout.CanaryPassed {
			t.Fatalf("%s: first's canary passed (record %+v): its health was counted from a Ready the kubelet wrote %v late", what, r, lag)
		}
		if q := s.of("second"); len(q) != 1 {
			t.Fatalf("%s: second was stamped again, stamps %v: the bad change reached it", what, q)
		}
		<-time.After(250 * time.Millisecond)
	}
}

// TestLateKubeletPassesNoCanary: first, two replicas, is the change's
// canary, held at one new pod; its kubelet writes the pod's Ready 25 s late,
// then its crash 15 s after that write. The canary does not pass in between
// (it would at the Ready's transition plus the 30 s window, 5 s after the
// write): it fails on the crash, and second is never stamped with the bad
// change. With a budget of 5 here, a passed canary would release second at
// once.
func TestLateKubeletPassesNoCanary(t *testing.T) {
	t.Parallel()
	l := env.LaneWith(t, framework.LaneOptions{HashKey: hashKey}, lateFlags("--max-concurrent-rollouts=5")...)
	ns := l.NamespaceNamed(t, lateCanaryNS, nil)
	s := watchStamps(t, ns)
	lateWave(t, ns, 2)

	env.Apply(t, sharedIn(ns, "bad", "x"))
	pod := heldPod(t, ns)
	if r := rollout.Read(deployment(t, ns, "first").Annotations); r.Canary != rollout.CanaryRunning {
		t.Fatalf("first's record %+v, want its canary running", r)
	}
	written := kubeletWrites(t, ns, pod, 0, false)
	staysHalted(t, ns, s, written.Add(crashAfter), "before the late kubelet wrote the crash", true)
	kubeletWrites(t, ns, pod, 0, true)
	env.WaitEvent(t, deployment(t, ns, "first"), rollout.ReasonRolloutFailed, "restarted")
	// Past the window counted from the Ready's write, and past the 30 s a
	// halted workload waits before it is asked again.
	staysHalted(t, ns, s, time.Now().Add(quiet), "after the crash", true)
	// The bad change cost one pod: the Deployment controller, which counts
	// the held pod available from the Ready's transition, made no second.
	if n := len(env.PodsStamped(t, ns, "first", waveHashIn(ns, "first", "bad"))); n != 1 {
		t.Errorf("%d pods of first ran the bad change, want 1 (its canary's)", n)
	}
	if r := rollout.Read(deployment(t, ns, "first").Annotations); r.State != rollout.Failed || r.Halted == "" {
		t.Errorf("first's record %+v, want failed and halting", r)
	}
	t.Logf("the canary's Ready, written %v late, did not pass it in the %v before its crash was written; second kept its stamp", lag, crashAfter)
}

// TestLateKubeletLiftsNoHalt: first, one replica (its whole rollout is the
// canary), fails in its verification window; its kubelet then writes a Ready
// 25 s late, as if it had recovered, and the next crash 15 s after that
// write. The halt is not lifted in between (it would be at the Ready's
// transition plus the window, 5 s after the write: the real-node failure
// this reproduces), and second is never stamped with the bad change.
func TestLateKubeletLiftsNoHalt(t *testing.T) {
	t.Parallel()
	l := env.LaneWith(t, framework.LaneOptions{HashKey: hashKey}, lateFlags()...)
	ns := l.NamespaceNamed(t, lateHaltNS, nil)
	s := watchStamps(t, ns)
	lateWave(t, ns, 1)

	env.Apply(t, sharedIn(ns, "bad", "x"))
	pod := heldPod(t, ns)
	kubeletWrites(t, ns, pod, 0, false)
	framework.Eventually(t, time.Minute, func() (bool, string) {
		r := rollout.Read(deployment(t, ns, "first").Annotations)
		return r.State == rollout.Verifying, fmt.Sprintf("first: record %+v, want it verifying", r)
	})
	kubeletWrites(t, ns, pod, 0, true)
	env.WaitEvent(t, deployment(t, ns, "first"), rollout.ReasonRolloutFailed, "restarted")
	if r := rollout.Read(deployment(t, ns, "first").Annotations); r.State != rollout.Failed || r.Halted == "" {
		t.Fatalf("first's record %+v, want failed and halting", r)
	}

	written := kubeletWrites(t, ns, pod, 1, false)
	framework.Eventually(t, time.Minute, func() (bool, string) {
		return framework.RolledOut(deployment(t, ns, "first")), "first not complete again on its Ready pod"
	})
	staysHalted(t, ns, s, written.Add(crashAfter), "before the late kubelet wrote the next crash", false)
	kubeletWrites(t, ns, pod, 1, true)
	staysHalted(t, ns, s, time.Now().Add(quiet), "after the next crash", false)
	if n := env.CountEvents(t, deployment(t, ns, "first"), rollout.ReasonRolloutRecovered); n != 0 {
		t.Errorf("first reported %s %d times, want none", rollout.ReasonRolloutRecovered, n)
	}
	t.Logf("the halt held through a Ready written %v late and the crash written %v after it; second kept its stamp", lag, crashAfter)
}
