package rollout

import (
	"context"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/workload"
)

// Need is what a workload's data asks for, by the no-surprise-rollout rule
// (the reconciler's Decide): nothing, a record, or a rollout.
type Need int

const (
	// NeedNothing: the workload is up to date.
	NeedNothing Need = iota
	// NeedRecord: write the metadata record only (a baseline, a re-baseline
	// after a key change, or bookkeeping); no rollout.
	NeedRecord
	// NeedRollout: the data it references changed since its pods were made.
	NeedRollout
)

// Observation is what the reconciler observed of one workload, and all the
// wave's rules need to decide about it.
type Observation struct {
	Key Key
	// Kind is the workload's kind.
	Kind workload.Kind
	// Object is the workload as cached; nil when it is gone.
	Object client.Object
	// Record is its rollout record as Verify read it (the zero Record when it
	// is not sealed by configstamp: such a record counts for nothing).
	Record Record
	// Ours: opted in, or selected by a ConfigMap's rollout selector. The rest
	// describe a workload of ours.
	Ours bool
	Need Need
	// CacheBehind: its record names source versions newer than this cache's.
	CacheBehind bool
	// Hash is the stamp its data asks for; Causes the changes behind it.
	Hash   string
	Causes []Change
	// Priority and Window are its rollout priority and debounce window.
	Priority int
	Window   time.Duration
	// Halted reads, from the cache, the halted change that holds one of
	// Causes ("" when none): asked before and again after a slot is granted.
	Halted func(context.Context) (string, error)
}

// Verb is what a Decision asks the reconciler to write.
type Verb int

const (
	// Idle: write nothing.
	Idle Verb = iota
	// Resume: the failed workload is complete again; write Record (the halt lifted).
	Resume
	// Close: the rollout completed or failed; write Record, on the judged
	// version of the workload only.
	Close
	// Baseline: write the data record only.
	Baseline
	// Stamp: stamp the pod template and write the data record and Record (the
	// rollout's start; nil when rollouts are not followed) in one patch.
	Stamp
)

// Decision is the one answer to an Observation.
type Decision struct {
	Verb   Verb
	Record *Record
	// After: ask again after this long (0: when something changes).
	After time.Duration
	// Failure: Close of a failed rollout, and why it failed.
	Failure string
	// Supersedes: Stamp of a change that replaces the workload's own rollout
	// under way; write it on the observed version only, and it keeps the slot.
	Supersedes bool
	// Halted: the workload waits on this halted change, news to tell (once).
	Halted string
	// Wake: workloads next in the wave, to wake once Close is written.
	Wake []Key
}

// Wave rules of the reconcile, in the order they apply.
const (
	// staleRecheck: how soon a reconcile whose cache lags behind asks again.
	staleRecheck = 200 * time.Millisecond
	// haltedRecheck: how often a workload waiting on a halted change looks
	// again, in case the wake-up of the lift was missed.
	haltedRecheck = 30 * time.Second
)

// Decide is the one question the reconciler asks about a workload. The rules,
// in order:
//
//  1. Gone: it needs nothing, and holds no slot.
//  2. Failed, halting its change, and complete again: resume (lift the halt).
//  3. Its record is open: judge the rollout. Completed or failed: close the
//     record, with the halt in the same patch; the slot it held is free once
//     the cache shows that patch, never before, and the next in the wave are
//     woken. Still rolling: follow it, by its deadline, unless a new change
//     supersedes it (6).
//  4. Not ours, or nothing new: nothing (still following a rollout under way).
//  5. Its cache lags behind its record: ask again shortly.
//  6. A record only: write it. A rollout: gate it (halt, debounce, budget and
//     rate, see gate); a change during its own rollout supersedes it and keeps
//     its slot.
func (s *Scheduler) Decide(ctx context.Context, o Observation) (Decision, error) {
	if o.Object == nil {
		s.settle(o.Key)
		s.Release(o.Key)
		return Decision{}, nil
	}
	rec := o.Record
	if rec.State == Failed && rec.Halted != "" && !pin.RolledBack(o.Object.GetAnnotations(), o.Kind.PodTemplate(o.Object)) {
		// Complete again with what failed; a pinned workload a user rolled back
		// to an earlier revision's snapshots runs other data, and recovers nothing.
		if complete, _ := Complete(o.Kind, o.Object); complete {
			resumed := rec.Resume()
			return Decision{Verb: Resume, Record: &resumed}, nil
		}
	}
	var following time.Duration // > 0: its own rollout is under way
	if rec.Open() {
		j := Judge(o.Kind, o.Object, rec.Started, s.Policy.ProgressDeadline, s.now())
		switch j.Verdict {
		case Pending:
			following = j.Recheck
		case Done:
			return s.close(ctx, o.Key, rec.Complete(), ""), nil
		case Failure:
			return s.close(ctx, o.Key, rec.Fail(s.Policy.HaltOnFailure), j.Reason), nil
		}
	}
	rolling := following > 0
	switch {
	case !o.Ours && rolling:
		return Decision{After: following}, nil
	case !o.Ours:
		s.settle(o.Key)
		return Decision{}, nil
	case o.CacheBehind:
		return Decision{After: staleRecheck}, nil
	case rolling && o.Need != NeedRollout: // nothing new: keep following the rollout under way
		return Decision{After: following}, nil
	case o.Need == NeedNothing:
		s.settle(o.Key)
		return Decision{}, nil
	case o.Need == NeedRecord:
		s.settle(o.Key)
		return Decision{Verb: Baseline}, nil
	}
	d, open, err := s.gate(ctx, o, rolling)
	if !open || err != nil {
		if rolling && d.After > following {
			d.After = following // the rollout under way is judged by its deadline meanwhile
		}
		return d, err
	}
	d = Decision{Verb: Stamp, Supersedes: rolling}
	if s.Policy.Tracks() {
		start := StartRecord(s.now(), o.Causes, NothingToWaitFor(o.Kind, o.Object))
		d.Record = &start
	}
	return d, nil
}

// close ends k's open record with rec. The slot stays counted until the cache
// shows rec (it is read from the open records there), so the halt a failure
// writes is known before the next in the wave may take the slot.
func (s *Scheduler) close(ctx context.Context, k Key, rec Record, failure string) Decision {
	s.Release(k)
	return Decision{Verb: Close, Record: &rec, Failure: failure, Wake: s.Next(ctx, 2)}
}

// gate lets a rollout start only when its change is not halted, its debounce
// window has passed and, unless it supersedes its own rollout under way, a
// slot is granted. open: stamp now.
func (s *Scheduler) gate(ctx context.Context, o Observation, supersedes bool) (Decision, bool, error) {
	if d, halted, err := s.checkHalt(ctx, o); halted || err != nil {
		return d, false, err
	}
	if wait := s.Debounce(o.Key, o.Hash, o.Window, o.Priority); wait > 0 {
		return Decision{After: wait}, false, nil
	}
	if supersedes { // its rollout holds a slot already, and keeps it
		s.Forget(o.Key)
		return Decision{}, true, nil
	}
	// A rollout with nothing to wait for, or that nobody follows, holds no slot.
	needsSlot := !NothingToWaitFor(o.Kind, o.Object) && s.Policy.Tracks()
	wait, err := s.Acquire(ctx, o.Key, o.Priority, needsSlot)
	if err != nil || wait > 0 {
		return Decision{After: wait}, false, err
	}
	// The slot may be free because a rollout of this very change just
	// failed: its close and its halt reach the cache in one update, which may
	// have landed after the look above. Look again now that the slot is ours.
	if d, halted, err := s.checkHalt(ctx, o); halted || err != nil {
		s.Release(o.Key)
		return d, false, err
	}
	return Decision{}, true, nil
}

// checkHalt reports whether one of o's changes is halted, and notes that o
// waits on it (news: Decision.Halted, to tell once).
func (s *Scheduler) checkHalt(ctx context.Context, o Observation) (Decision, bool, error) {
	halted, err := o.Halted(ctx)
	if err != nil || halted == "" {
		s.ClearHalted(o.Key)
		return Decision{}, false, err
	}
	d := Decision{After: haltedRecheck}
	if s.NoteHalted(o.Key, halted, o.Priority) {
		d.Halted = halted
	}
	// Lifting a halt wakes its waiters at once (Lifted); a lift that lands
	// between the read above and NoteHalted would be missed, so a halted
	// workload also asks again now and then.
	return d, true, nil
}

// settle: k needs no rollout now.
func (s *Scheduler) settle(k Key) {
	s.Forget(k)
	s.ClearHalted(k)
}
