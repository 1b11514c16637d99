package rollout

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/workload"
)

// Verdict is the judgement of an open rollout.
type Verdict int

const (
	// Pending: still rolling or verifying; judge again on the next status
	// change or at Recheck.
	Pending Verdict = iota
	// ToVerify: complete as `kubectl rollout status` says; verify it for the window.
	ToVerify
	// Done: the rollout completed (and, with a window, stayed healthy through it).
	Done
	// Failure: the rollout failed (Judgement.Reason says why).
	Failure
)

// Judgement is what Judge found.
type Judgement struct {
	Verdict Verdict
	// Reason says why a rollout failed, for events and logs.
	Reason string
	// Recheck is when a Pending rollout fails by the deadline unless it
	// completes first (nothing else may wake its reconcile).
	Recheck time.Duration
}

// Judge decides an open rollout rec, its pods read by v, the last progress
// of its status seen at progressed (zero: none seen):
//   - any state: a sign of failure among the new revision's pods (v.Problem,
//     see InspectPods) fails it at once, from the moment the pod exists.
//   - Rolling: complete as `kubectl rollout status` understands it for the
//     kind and update strategy (see Complete) gives Verify, or Done when there
//     is no window to verify (v.Window 0, a paused Deployment, nothing to wait
//     for); failed when a Deployment reports ProgressDeadlineExceeded or when
//     its status made no progress for deadline (since the later of its start
//     and progressed: a long rollout that keeps progressing never fails by
//     it; its slot is bounded apart, see Scheduler.holdsSlot); else pending,
//     judged again at the next status change, the next poll of its pods
//     (PodPoll) or the deadline, whichever comes first.
//   - Verifying: failed as above or when a Deployment's deadline is
//     exceeded; Done once it stayed healthy until rec.Until (its pods read
//     then); else pending. A Deployment's Available condition alone decides
//     nothing: a scale-up turns it False.
func Judge(kind workload.Kind, obj client.Object, rec Record, v Verification, deadline time.Duration, progressed, now time.Time) Judgement {
	if rec.State == Verifying {
		return judgeVerifying(kind, obj, rec, v, now)
	}
	if v.Problem != "" {
		return Judgement{Verdict: Failure, Reason: "its new pods failed: " + v.Problem}
	}
	complete, exceeded := Complete(kind, obj)
	switch {
	case complete && v.Window > 0 && !paused(obj) && !NothingToWaitFor(kind, obj):
		return Judgement{Verdict: ToVerify}
	case complete && v.Unread: // not completed unseen
		return Judgement{Verdict: Pending, Recheck: unreadRecheck}
	case complete:
		return Judgement{Verdict: Done}
	case exceeded:
		return Judgement{Verdict: Failure, Reason: failedReason(kind, obj)}
	}
	from := rec.Started
	if progressed.After(from) {
		from = progressed
	}
	left := from.Add(deadline).Sub(now)
	if left < 0 {
		return Judgement{Verdict: Failure, Reason: fmt.Sprintf("it made no progress for the progress deadline of %v", deadline)}
	}
	return Judgement{Verdict: Pending, Recheck: recheck(left+time.Second, rec, v, now)}
}

// PodPoll is how soon the pods of an open rollout are read again when
// nothing else wakes its reconcile: a pod that cannot start
// (CreateContainerConfigError) changes no status of its workload. Every
// PodPollMin early in the rollout, backing off to PodPollMax: one pod LIST
// (served from the API server's watch cache) per open rollout per interval;
// with more than ten open (no budget), the interval grows with their number
// (Scheduler.PollScale).
func PodPoll(elapsed time.Duration) time.Duration {
	return min(max(elapsed/8, PodPollMin), PodPollMax)
}

// poll is PodPoll scaled by v.PollScale.
func (v Verification) poll(elapsed time.Duration) time.Duration {
	return PodPoll(elapsed) * time.Duration(max(v.PollScale, 1))
}

// Pod poll bounds (PodPoll).
const (
	PodPollMin = 2 * time.Second
	PodPollMax = 10 * time.Second
)

// recheck is the sooner of after, the next pod poll, and when a pod not
// Ready yet is judged by its probes' budget.
func recheck(after time.Duration, rec Record, v Verification, now time.Time) time.Duration {
	after = min(after, v.poll(now.Sub(rec.Started)))
	if !v.JudgeAt.IsZero() {
		after = min(after, max(v.JudgeAt.Sub(now), 0)+100*time.Millisecond)
	}
	return after
}

// unreadRecheck: how soon a rollout whose pods could not be read when it
// would complete is judged again.
const unreadRecheck = 5 * time.Second

// judgeVerifying judges a rollout in its verification window.
func judgeVerifying(kind workload.Kind, obj client.Object, rec Record, v Verification, now time.Time) Judgement {
	fail := func(why string) Judgement {
		return Judgement{Verdict: Failure, Reason: "it failed verification: " + why}
	}
	if v.Problem != "" {
		return fail(v.Problem)
	}
	if _, exceeded := Complete(kind, obj); exceeded {
		return fail(failedReason(kind, obj))
	}
	left := rec.Until.Sub(now)
	switch {
	case left <= 0 && v.Unread: // not completed unseen; the slot's bound still holds
		return Judgement{Verdict: Pending, Recheck: unreadRecheck}
	case left <= 0:
		return Judgement{Verdict: Done}
	}
	// Judged again at the window's end, whenever the workload's status
	// changes before (a pod that crashes or loses its readiness changes its
	// ready and available counts), and at each poll of its pods.
	return Judgement{Verdict: Pending, Recheck: recheck(left+100*time.Millisecond, rec, v, now)}
}

func paused(obj client.Object) bool {
	d, ok := obj.(*appsv1.Deployment)
	return ok && d.Spec.Paused
}

// Complete reports whether obj's rollout is complete, with the semantics of
// `kubectl rollout status` (its status viewers) for each kind:
//   - Deployment: paused counts as complete (it will not roll until resumed);
//     else the controller observed the latest generation, every desired replica
//     is updated and available, and no old replica is left. exceeded: the
//     Progressing condition says ProgressDeadlineExceeded.
//   - StatefulSet: OnDelete has nothing to wait for (pods change only when
//     someone deletes them); else the latest generation observed, every replica
//     ready, and with a partition the replicas at or above it updated, without
//     one the update revision current.
//   - DaemonSet: OnDelete as above; else the latest generation observed and
//     every scheduled node updated and available.
//   - an extra kind (--kinds-config): as its workload.Progress says; without
//     one, complete at once.
//
// Other objects are complete.
func Complete(kind workload.Kind, obj client.Object) (complete, exceeded bool) {
	switch w := obj.(type) {
	case *appsv1.Deployment:
		return deploymentComplete(w)
	case *appsv1.StatefulSet:
		return statefulSetComplete(w), false
	case *appsv1.DaemonSet:
		return daemonSetComplete(w), false
	case *unstructured.Unstructured:
		if kind.Unstructured() && kind.Progress != nil {
			return customComplete(w, kind.Progress)
		}
	}
	return true, false
}

// NothingToWaitFor reports whether a new template of obj replaces no pod by
// itself (update strategy OnDelete, no replicas, a StatefulSet partition at
// or above its replicas), so a rollout holds no slot and verifies nothing.
func NothingToWaitFor(kind workload.Kind, obj client.Object) bool {
	switch w := obj.(type) {
	case *appsv1.Deployment:
		return replicas(w.Spec.Replicas) == 0
	case *appsv1.StatefulSet:
		if ru := w.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil && *ru.Partition >= replicas(w.Spec.Replicas) {
			return true
		}
		return w.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType || replicas(w.Spec.Replicas) == 0
	case *appsv1.DaemonSet:
		return w.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType
	case *unstructured.Unstructured:
		return kind.Progress == nil
	}
	return false
}

// LostReadiness reports whether newObj's status counts fewer ready or
// available pods than oldObj's (a crash, a readiness loss, a scale-down).
func LostReadiness(oldObj, newObj client.Object) bool {
	switch n := newObj.(type) {
	case *appsv1.Deployment:
		o, ok := oldObj.(*appsv1.Deployment)
		return ok && (n.Status.ReadyReplicas < o.Status.ReadyReplicas || n.Status.AvailableReplicas < o.Status.AvailableReplicas)
	case *appsv1.StatefulSet:
		o, ok := oldObj.(*appsv1.StatefulSet)
		return ok && (n.Status.ReadyReplicas < o.Status.ReadyReplicas || n.Status.AvailableReplicas < o.Status.AvailableReplicas)
	case *appsv1.DaemonSet:
		o, ok := oldObj.(*appsv1.DaemonSet)
		return ok && (n.Status.NumberReady < o.Status.NumberReady || n.Status.NumberAvailable < o.Status.NumberAvailable)
	}
	return false
}

// statusMark is what of obj's status tells its rollout's progress: any
// change of it is progress (a crash-looping pod changes it too, and fails
// the rollout by its pods).
func statusMark(kind workload.Kind, obj client.Object) string {
	switch w := obj.(type) {
	case *appsv1.Deployment:
		st := w.Status
		return fmt.Sprint(st.ObservedGeneration, st.Replicas, st.UpdatedReplicas, st.ReadyReplicas, st.AvailableReplicas)
	case *appsv1.StatefulSet:
		st := w.Status
		return fmt.Sprint(st.ObservedGeneration, st.Replicas, st.UpdatedReplicas, st.ReadyReplicas, st.CurrentReplicas, st.AvailableReplicas, st.UpdateRevision)
	case *appsv1.DaemonSet:
		st := w.Status
		return fmt.Sprint(st.ObservedGeneration, st.DesiredNumberScheduled, st.UpdatedNumberScheduled, st.NumberReady, st.NumberAvailable)
	case *unstructured.Unstructured:
		st, _, _ := unstructured.NestedFieldNoCopy(w.Object, "status")
		return fmt.Sprint(st) // fmt prints maps sorted by key
	}
	return ""
}

// failedReason says why Complete found obj's rollout failed.
func failedReason(kind workload.Kind, obj client.Object) string {
	if u, ok := obj.(*unstructured.Unstructured); ok && kind.Progress != nil {
		phase, _, _ := unstructured.NestedString(u.Object, strings.Split(kind.Progress.Phase, ".")...)
		return fmt.Sprintf("its %s reports the failed phase %q", kind.Progress.Phase, phase)
	}
	return "its progress deadline was exceeded (ProgressDeadlineExceeded)"
}

// customComplete judges an extra kind's rollout from the fields its Progress
// names (see workload.Progress); a field that is missing or of another type
// reads as "not there yet".
func customComplete(u *unstructured.Unstructured, p *workload.Progress) (complete, exceeded bool) {
	if p.ObservedGeneration != "" {
		observed, ok := intField(u, p.ObservedGeneration)
		if !ok || observed < u.GetGeneration() {
			return false, false
		}
	}
	if p.Phase != "" {
		phase, _, _ := unstructured.NestedString(u.Object, strings.Split(p.Phase, ".")...)
		if slices.Contains(p.FailedPhases, phase) {
			return false, true
		}
		if !slices.Contains(p.CompletePhases, phase) {
			return false, false
		}
	}
	if p.UpdatedReplicas != "" {
		want := int64(1)
		if p.Replicas != "" {
			if n, ok := intField(u, p.Replicas); ok {
				want = n
			}
		}
		updated, _ := intField(u, p.UpdatedReplicas)
		available := updated
		if p.AvailableReplicas != "" {
			available, _ = intField(u, p.AvailableReplicas)
		}
		if updated < want || available < updated {
			return false, false
		}
	}
	return true, false
}

// intField reads an integer, or an integer written as a string, at path.
func intField(u *unstructured.Unstructured, path string) (int64, bool) {
	v, found, err := unstructured.NestedFieldNoCopy(u.Object, strings.Split(path, ".")...)
	if err != nil || !found {
		return 0, false
	}
	switch n := v.(type) {
	case int64:
		return n, true
	case float64:
		return int64(n), true
	case string:
		i, err := strconv.ParseInt(n, 10, 64)
		return i, err == nil
	}
	return 0, false
}

func deploymentComplete(d *appsv1.Deployment) (complete, exceeded bool) {
	if d.Spec.Paused {
		return true, false
	}
	st := d.Status
	if st.ObservedGeneration < d.Generation {
		return false, false
	}
	for _, c := range st.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded" {
			return false, true
		}
	}
	want := replicas(d.Spec.Replicas)
	return st.UpdatedReplicas >= want && st.Replicas <= st.UpdatedReplicas && st.AvailableReplicas >= st.UpdatedReplicas, false
}

func statefulSetComplete(s *appsv1.StatefulSet) bool {
	if s.Spec.UpdateStrategy.Type == appsv1.OnDeleteStatefulSetStrategyType {
		return true
	}
	st, want := s.Status, replicas(s.Spec.Replicas)
	if st.ObservedGeneration == 0 || st.ObservedGeneration < s.Generation || st.ReadyReplicas < want {
		return false
	}
	if ru := s.Spec.UpdateStrategy.RollingUpdate; ru != nil && ru.Partition != nil {
		return st.UpdatedReplicas >= want-*ru.Partition
	}
	return st.UpdateRevision == st.CurrentRevision
}

func daemonSetComplete(d *appsv1.DaemonSet) bool {
	if d.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType {
		return true
	}
	st := d.Status
	return st.ObservedGeneration >= d.Generation && st.UpdatedNumberScheduled >= st.DesiredNumberScheduled &&
		st.NumberAvailable >= st.DesiredNumberScheduled
}

func replicas(p *int32) int32 {
	if p == nil {
		return 1
	}
	return *p
}
