package rollout

import (
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/workload"
)

// Judgement is what Judge found.
type Judgement struct {
	// Trigger: Progressing, RolloutComplete, RolloutVerified or RolloutFailed.
	Trigger Trigger
	// Reason says why a rollout failed, for events and logs.
	Reason string
	// Recheck is when a Progressing rollout fails by the deadline unless it
	// completes first (nothing else may wake its reconcile).
	Recheck time.Duration
}

// Judge decides an open rollout rec, its pods read by v, the last progress
// of its status seen at progressed (zero: none seen):
//   - any state: a sign of failure among the new revision's pods (v.Problem,
//     see InspectPods) fails it at once, from the moment the pod exists.
//   - Rolling: complete as `kubectl rollout status` understands it for the
//     kind and update strategy (see Complete) gives RolloutComplete, or RolloutVerified when there
//     is no window to verify (v.Window 0, a paused Deployment, nothing to wait
//     for); failed when a Deployment reports ProgressDeadlineExceeded or when
//     its status made no progress for deadline (since the later of its start
//     and progressed: a long rollout that keeps progressing never fails by
//     it; its slot is bounded apart, see Scheduler.holdsSlot); else pending,
//     judged again at the next status change, the next poll of its pods
//     (PodPoll) or the deadline, whichever comes first.
//   - Verifying: failed as above or when a Deployment's deadline is
//     exceeded; RolloutVerified once it stayed healthy until rec.Until (its pods read
//     then); else pending. A Deployment's Available condition alone decides
//     nothing: a scale-up turns it False.
func Judge(kind workload.Kind, obj client.Object, rec Record, v Verification, deadline time.Duration, progressed, now time.Time) Judgement {
	if rec.State == Verifying {
		return judgeVerifying(kind, obj, rec, v, now)
	}
	if v.Problem != "" {
		return Judgement{Trigger: RolloutFailed, Reason: "its new pods failed: " + v.Problem}
	}
	st := StatusSeen(kind, obj, v)
	switch {
	case st.Complete && st.Idle() && rec.Canary == CanaryRunning:
		// Paused by its user mid-canary, or scaled to no replicas: it made
		// no judged pod, so it has not passed. Followed, not failed: its own
		// controller counts no deadline while paused, and its slot ends at
		// its bound (SlotBound), when the next workload may be the canary.
		return Judgement{Trigger: Progressing, Recheck: v.poll(now.Sub(rec.Started))}
	case st.Complete && v.Window > 0 && !st.Paused && !st.NothingToWaitFor:
		return Judgement{Trigger: RolloutComplete}
	case st.Complete && v.Unread: // not completed unseen
		return Judgement{Trigger: Progressing, Recheck: unreadRecheck}
	case st.Complete:
		return Judgement{Trigger: RolloutVerified}
	case st.Exceeded:
		return Judgement{Trigger: RolloutFailed, Reason: st.FailedReason}
	}
	from := rec.Started
	if progressed.After(from) {
		from = progressed
	}
	left := from.Add(deadline).Sub(now)
	switch {
	case left < 0 && len(v.StalledBy) > 0:
		// Its own controller waits for NotReady nodes: followed, not failed
		// (its slot is given back at its bound, SlotBound).
		return Judgement{Trigger: Progressing, Recheck: v.poll(now.Sub(rec.Started))}
	case left < 0:
		return Judgement{Trigger: RolloutFailed, Reason: fmt.Sprintf("it made no progress for the progress deadline of %v", deadline)}
	}
	return Judgement{Trigger: Progressing, Recheck: recheck(left+time.Second, rec, v, now)}
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
		return Judgement{Trigger: RolloutFailed, Reason: "it failed verification: " + why}
	}
	if v.Problem != "" {
		return fail(v.Problem)
	}
	if st := kind.Status(obj); st.Exceeded {
		return fail(st.FailedReason)
	}
	left := rec.Until.Sub(now)
	switch {
	case left <= 0 && v.Unread: // not completed unseen; the slot's bound still holds
		return Judgement{Trigger: Progressing, Recheck: unreadRecheck}
	case left <= 0:
		return Judgement{Trigger: RolloutVerified}
	}
	// Judged again at the window's end, whenever the workload's status
	// changes before (a pod that crashes or loses its readiness changes its
	// ready and available counts), and at each poll of its pods.
	return Judgement{Trigger: Progressing, Recheck: recheck(left+100*time.Millisecond, rec, v, now)}
}

// Complete reports whether obj's rollout is complete, with the semantics of
// `kubectl rollout status` (its status viewers) for its kind, and whether it
// failed as its controller reports it: see workload.Status and each kind's
// Behavior (workload's deployment.go, statefulset.go, daemonset.go,
// custom.go). Other objects are complete.
func Complete(kind workload.Kind, obj client.Object, v Verification) (complete, exceeded bool) {
	st := StatusSeen(kind, obj, v)
	return st.Complete, st.Exceeded
}

// StatusSeen is obj's status as its kind reads it, and complete, once its
// controller observed the template, when its pods were judged to be done
// but for those on NotReady nodes that cannot be replaced there
// (Verification.NotWaitedFor).
func StatusSeen(kind workload.Kind, obj client.Object, v Verification) workload.Status {
	st := kind.Status(obj)
	if len(v.NotWaitedFor) > 0 && st.Observed {
		st.Complete = true
	}
	return st
}

// LostReadiness reports whether newObj, of kind, counts fewer ready or
// available pods than oldObj (a crash, a readiness loss, a scale-down).
func LostReadiness(kind workload.Kind, oldObj, newObj client.Object) bool {
	o, n := kind.Status(oldObj), kind.Status(newObj)
	return n.Ready < o.Ready || n.Available < o.Available
}
