package rollout

import (
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// Timings of the wave's rules.
const (
	// StaleRecheck: how soon a reconcile whose cache lags behind a write (or
	// whose own write was refused as stale) asks again.
	StaleRecheck = 200 * time.Millisecond
	// haltedRecheck: how often a workload waiting on a halted change looks
	// again, in case the wake-up of the lift was missed.
	haltedRecheck = 30 * time.Second
)

// Situation is everything the wave's rules weigh about one workload at one
// moment: the observation, its record, and what this process alone knows.
type Situation struct {
	Observation
	// Record is the workload's rollout record, its seal checked (the zero
	// Record when it is not sealed by configstamp: such a record counts for
	// nothing).
	Record Record
	// Causes are the changes a rollout of it now would roll out.
	Causes []Change
	// RotationRest are the members of its rotate-together group those
	// changes wait for (rotationRest; none: they wait for nothing).
	RotationRest []stamp.ObjectRef
	// Now is the time of the decision.
	Now time.Time
	// Stamping: this process stamped it, and the cache it was read from does
	// not show that yet.
	Stamping bool
	// Progressed: when its open rollout last progressed, as this process
	// saw its status change or its pods show it (Scheduler.progressed; zero:
	// never); its progress deadline counts from then.
	Progressed time.Time
	// Ring: its namespace's ring ("": none; Rings).
	Ring string
	// Stray: the hold and pause its failed canary set, still set, of a
	// record no longer sealed: its halt was removed by hand or by `kubectl
	// configstamp resume`, which ends their reason. Put back at once
	// (Settle) or by the next stamp (StrayHold).
	Stray workload.Hold
}

// Ruling is what Rules decide: the transition, on what trigger, and the
// record it writes.
type Ruling struct {
	Transition Transition
	// On: the trigger the transition is taken on (a row of Lifecycle).
	On Trigger
	// Record: the record Resume, PassCanary, StartVerify or a close writes.
	Record *Record
	// Failure: why a closed rollout failed.
	Failure string
	// After: ask again after this long (Follow, Stale, StartVerify); for Gate,
	// when the rollout under way it would supersede is judged again.
	After time.Duration
	// Recheck: whatever the step, ask again after this long at the latest
	// (a halted failure whose pods recover: when their health lasted a
	// window). 0: no such time.
	Recheck time.Duration
	// Suspect: completed, its change still rolling elsewhere, and a pod of
	// it not Ready: the change waits until it is judged.
	Suspect bool
}

// Rules are the wave's rules, in the order they apply, as a pure function of
// the situation and the policy:
//
//  1. Gone, or out of this installation's scope: it needs nothing, and
//     holds no slot; an open record there is not this installation's to
//     judge or close. Opted out in scope, a canary's hold still in its
//     spec is put back (released).
//  2. Failed, halting its change, complete again with no sign of failure
//     among the pods of its revision (a canary paused by its failure: its
//     new pods, at least one), and every one of them Ready with no
//     restart for a full window (and for longer than the longest run before
//     a container's last crash, by a late write: a crash loop never looks
//     recovered, outlast): resume
//     (lift the halt, and put back the canary's pause). Not yet that long: ask again when it will be
//     (Recheck). One Ready read lifts nothing.
//     A pinned workload a user rolled back to an earlier revision's snapshots
//     runs other data, and recovers nothing.
//  3. Completed while its change still rolls to other workloads (its pods
//     are read then), and crashing: fail it now, halting the rest. A pod
//     of it not Ready: a suspect; the rest of the change waits while it is
//     looked at again (Suspect).
//  4. Its record is open: judge the rollout. Complete as `kubectl rollout
//     status` says: verify it for its window (keeping its slot). Verified or
//     failed: close the record. Still rolling or verifying: follow it, by its
//     deadline, its window and its pods' polls, unless a new change
//     supersedes it (8).
//  5. Not ours, or nothing new: nothing (still following a rollout under way).
//  6. Its cache lags behind its record, or behind this process's own stamp:
//     ask again shortly (never stamp twice).
//  7. A record only: write it.
//  8. A rollout: the gate decides when; a change during its own rollout
//     supersedes it and keeps its slot, within the slot's bound.
func Rules(sit Situation, p Policy) Ruling {
	o, rec := sit.Observation, sit.Record
	if o.Object == nil {
		return Ruling{Transition: Gone, On: Deleted}
	}
	if r, ok := released(sit); ok {
		return r
	}
	if o.OutOfScope {
		return Ruling{Transition: Settle, On: NotOurs}
	}
	var recheck time.Duration
	if rec.State == Failed && rec.Halted != "" && !pin.RolledBack(o.Object.GetAnnotations(), o.Kind.PodTemplate(o.Object)) {
		if at, ok := recovered(o, rec, sit.Now); ok && !at.After(sit.Now) {
			resumed := rec.Resume()
			return Ruling{Transition: Resume, On: Recovered, Record: &resumed}
		} else if ok {
			recheck = at.Sub(sit.Now) + 100*time.Millisecond
		}
	}
	if rec.State == Idle && o.Ours && !o.Kind.Status(o.Object).Idle() {
		rolling := rec.Unidle(sit.Now)
		return Ruling{Transition: Unidle, On: MakesPods, Record: &rolling, After: PodPollMin}
	}
	if rec.State == Completed && o.Verification.Problem != "" {
		failed := rec.Fail(p.HaltOnFailure)
		return Ruling{Transition: CloseFailed, On: Crashed, Record: &failed,
			Failure: "it crashed after it completed, while its change still rolls to other workloads: " + o.Verification.Problem}
	}
	suspect := rec.State == Completed && o.Verification.Read && !o.Verification.Healthy
	if suspect {
		// A pod went unready while its change still rolls elsewhere: the
		// readiness probe may say so before the container's exit shows,
		// and nothing else wakes this reconcile then (its ready count
		// stays down). Look again at the next poll; meanwhile the rest of
		// the change waits (Scheduler.suspects).
		recheck = o.Verification.poll(0)
	}
	held := rec.State == Rolling && rec.Canary == CanaryRunning && rec.Hold != ""
	if held && o.Need != NeedsRollout {
		if at, ok := canaryPassAt(o); ok && !at.After(sit.Now) {
			passed := rec.PassCanary()
			return Ruling{Transition: PassCanary, On: CanaryHealthy, Record: &passed}
		} else if ok {
			recheck = at.Sub(sit.Now) + 100*time.Millisecond
			// Until then configstamp holds it: its status stands still by
			// configstamp's hold, not a stall, and a window longer than
			// the progress deadline must not fail a healthy canary.
			sit.Progressed = later(sit.Progressed, at)
		}
	}
	ruling := judged(sit, p)
	if held && (ruling.Transition == CloseCompleted || ruling.Transition == StartVerify) {
		// Held at one pod, its workload may look complete (a StatefulSet's
		// partition): the rest of it has not rolled. It passes as a canary
		// first; a newer change supersedes it (it is judged no more).
		after := o.Verification.poll(sit.Now.Sub(rec.Started))
		ruling = Ruling{Transition: Follow, On: ruling.On, After: after}
		if o.Need == NeedsRollout {
			ruling = Ruling{Transition: Gate, On: NeedRollout, After: after}
		}
	}
	if recheck > 0 && (ruling.Recheck == 0 || recheck < ruling.Recheck) {
		ruling.Recheck = recheck
	}
	ruling.Suspect = suspect
	return ruling
}

// frozenNow reports whether o is still stopped by the freeze its failed
// canary's record holds (frozen).
func frozenNow(o Observation, rec Record) bool {
	held, err := workload.DecodeHold(rec.Hold)
	if err != nil || len(held) == 0 {
		return false
	}
	return o.Kind.Status(o.Object).Paused && held.Freezes(o.Object)
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// recovered: whether a failed workload is complete again with its pods
// healthy, and from when that has lasted a window. Pods not read (no list
// permission): complete is all there is to go by.
func recovered(o Observation, rec Record, now time.Time) (time.Time, bool) {
	v := o.Verification
	if frozenNow(o, rec) {
		// Paused by its canary's failure, complete says nothing; its new
		// revision's pods do (the canary's one pod, a restart at its start
		// since history): every one of them healthy for the window as set
		// (not less the minReadySeconds its hold raised) and longer than
		// its longest run before a crash (outlast), so a crash loop never
		// looks recovered.
		if !v.Read || v.Unread || v.Pods == 0 || !v.Healthy {
			return time.Time{}, false
		}
		return v.HealthySince.Add(max(o.VerifyWindow, v.Window, v.Outlast)), true
	}
	if complete, _ := Complete(o.Kind, o.Object, v); !complete || v.Unread || v.Problem != "" || (v.Read && !v.Healthy) {
		return time.Time{}, false
	}
	if !v.Read {
		return now, true
	}
	return v.HealthySince.Add(max(v.Window, v.Outlast)), true
}

// released: a workload of this installation's scope that opted out, whose
// spec still has the hold its sealed record names: put back at once, the
// record kept as it was otherwise (a halt stays; an open rollout is still
// followed, as a whole-workload canary). The hold's reason, configstamp's
// canary, has ended for this workload. Out of the scope nothing is touched:
// the namespace may be another installation's, whose hold it is (two
// installations may share a key); `kubectl configstamp unhold -n NS` puts a
// hold back there.
func released(sit Situation) (Ruling, bool) {
	if sit.Ours || sit.OutOfScope || sit.Record.Hold == "" {
		return Ruling{}, false
	}
	rec := sit.Record.Unhold()
	return Ruling{Transition: Settle, On: NotOurs, Record: &rec}, true
}

// verifiedID is the identity of o's template, whose rollout passed
// verification: its stamp and, read whole while it rolled, its digest
// (UndoFacts.Current); "" for a rollout with nothing to wait for: nothing
// was verified.
func verifiedID(o Observation) string {
	if st := o.Kind.Status(o.Object); st.NothingToWaitFor || st.Paused {
		return ""
	}
	tmpl := o.Kind.PodTemplate(o.Object)
	if tmpl == nil {
		return ""
	}
	id := VerifiedID{Stamp: tmpl.Annotations[stamp.AnnotationHash]}
	if o.Undo.Template != nil && o.Undo.Template.Annotations[stamp.AnnotationHash] == id.Stamp {
		id.Template = o.Undo.Current
	}
	return id.String()
}

// judged is rules 4 to 8.
func judged(sit Situation, p Policy) Ruling {
	o, rec := sit.Observation, sit.Record
	var following time.Duration // > 0: its own rollout is under way
	if rec.Open() {
		j := Judge(o.Kind, o.Object, rec, o.Verification, p.ProgressDeadline, sit.Progressed, sit.Now)
		switch j.Trigger {
		case Progressing:
			following = j.Recheck
		case RolloutComplete:
			verifying := rec.StartVerifying(sit.Now.Add(o.Verification.Window))
			return Ruling{Transition: StartVerify, On: RolloutComplete, Record: &verifying, After: min(o.Verification.Window+100*time.Millisecond, o.Verification.poll(sit.Now.Sub(rec.Started)))}
		case RolloutVerified:
			closed := rec.Complete(verifiedID(o))
			return Ruling{Transition: CloseCompleted, On: RolloutVerified, Record: &closed}
		case RolloutFailed:
			closed := rec.Fail(p.HaltOnFailure)
			return Ruling{Transition: CloseFailed, On: RolloutFailed, Record: &closed, Failure: j.Reason}
		}
	}
	rolling := following > 0
	switch {
	case !o.Ours && rolling:
		return Ruling{Transition: Follow, On: NotOurs, After: following}
	case !o.Ours:
		return Ruling{Transition: Settle, On: NotOurs}
	case o.CacheBehind, !rolling && sit.Stamping:
		return Ruling{Transition: Stale, On: CacheBehind, After: StaleRecheck}
	case rolling && o.Need != NeedsRollout: // nothing new: keep following the rollout under way
		return Ruling{Transition: Follow, On: o.Need.Trigger(), After: following}
	case o.Need == NeedsNothing:
		return Ruling{Transition: Settle, On: NeedNothing}
	case o.Need == NeedsRecord:
		return Ruling{Transition: Baseline, On: NeedRecord}
	}
	return Ruling{Transition: Gate, On: NeedRollout, After: following}
}

// StrayHold is obj's rollout-hold annotation, as written, when obj's
// record is not sealed and obj still has one of its fields at the value it
// set (nil otherwise): a failed canary's hold and pause, whose record
// stopped counting when its halt was removed, and which nothing else would
// put back. A hand-written one puts back only fields of obj's own spec that
// its writer could have set itself.
func StrayHold(obj client.Object) workload.Hold {
	h, err := workload.DecodeHold(Read(obj.GetAnnotations()).Hold)
	if err != nil || len(h) == 0 {
		return nil
	}
	if back, err := h.RestorePatch(obj); err != nil || back == nil {
		return nil
	}
	return h
}
