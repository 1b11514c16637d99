package rollout

import (
	"context"
	"strconv"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// Observation is what the reconciler observed of one workload: plain data,
// all the wave's rules need to decide about it.
type Observation struct {
	Key Key
	// Kind is the workload's kind.
	Kind workload.Kind
	// Object is the workload as cached; nil when it is gone. Its rollout
	// record is read (and its seal checked) by Decide.
	Object client.Object
	// Ours: opted in, or selected by a ConfigMap's rollout selector. The rest
	// describe a workload of ours.
	Ours bool
	// OutOfScope: its namespace is outside this installation's scope
	// (--watch-namespaces, --exclude-namespaces, --namespace-selector). Its
	// record, even one this process can read (an installation sharing the
	// hash key), is another installation's to judge.
	OutOfScope bool
	// Need is what its data asks for (NeedOf).
	Need Need
	// CacheBehind: its record names source versions newer than this cache's.
	CacheBehind bool
	// ReadAt: when its sources were about to be read. A change announced
	// after it (Scheduler.Announce) is one this observation may not show:
	// its Need says nothing of it.
	ReadAt time.Time
	// Hash is the stamp its data asks for; Sources the keyed digest of what it
	// references of each source now (workload.Computation.Sources), which
	// name the changes behind a rollout.
	Hash    string
	Sources map[stamp.ObjectRef]string
	// Priority and Window are its rollout priority and debounce window.
	Priority int
	Window   time.Duration
	// VerifyWindow is its verification window as set (Verification.Window
	// is less what its controller already waits: minReadySeconds), the
	// time a canary pod must stay healthy.
	VerifyWindow time.Duration
	// Rotation: its sources that change together (RotationOf).
	Rotation Rotation
	// Canary: a rollout of a change no canary passed yet makes it the
	// change's canary (Policy.Canary, AnnotationCanaryOpt).
	Canary bool
	// Verification: its verification window, and what its new revision's
	// pods showed (read while its rollout is verifying).
	Verification Verification
	// Data is what its data hashes to now: the record a baseline or a stamp
	// writes, and the key a new rollout record is sealed with.
	Data *workload.Computation
	// Undo is what a failed rollout's undo needs (UndoFacts).
	Undo UndoFacts
	// Notes: what observing it found to tell, whatever the decision (a bad
	// value of an annotation, pods configstamp may not list, NotReady
	// nodes its rollout does not wait for), told before Decide is asked.
	Notes []Event
}

// HaltFinder finds the halted change that holds one of causes in namespace
// ("" when none), from the cache (Halts).
type HaltFinder interface {
	By(ctx context.Context, namespace string, causes []Change) (string, error)
	// Where finds one in force in a namespace where says.
	Where(ctx context.Context, refs []stamp.ObjectRef, where func(namespace string) bool) (string, error)
}

// Decision is the one answer to an Observation: the transition taken and
// everything the reconciler does of it. act applies it in this order and
// decides nothing: the Patches, one after the other, stopping at the first
// that finds the workload changed or gone (stale: nothing more is done; ask
// again shortly; the slot a Stamp took goes back when Release says so);
// a hold the API server rejected (an admission policy that forbids the
// fields it sets) is written again without it (Unheld); then what the
// Stamp write did (StampWrite.Landed, judged from what the API server
// returned); the scheduler told the record Written; the
// Effects; the Undo (its outcome told by Undo.Done); the Wake.
type Decision struct {
	Transition Transition
	// On: the trigger it was taken on.
	On Trigger
	// Record: the record it writes (Resume, PassCanary, StartVerify, a
	// close; Stamp: the rollout's start, nil when rollouts are not followed).
	Record *Record
	// Judged: the workload's record as it was read (its seal checked), the
	// one a close ends.
	Judged Record
	// Causes: the changes a Stamp rolls out.
	Causes []Change
	// After: ask again after this long (0: when something changes).
	After time.Duration
	// Failure: CloseFailed's reason.
	Failure string
	// Supersedes: a Stamp of a change that replaces the workload's own
	// rollout under way; it keeps the slot.
	Supersedes bool
	// Halted: the workload waits on this halted change, news to tell (once).
	Halted string
	// Hold: the hold a Stamp sets (its canary's; nil when none). Any write
	// of a Record without the hold the Judged record carries puts that back.
	Hold workload.Hold

	// Patches: the writes, in order.
	Patches []Patch
	// Release: give the slot a Stamp took back when its patch did not land
	// (Scheduler.Release: it keeps its place in the wave).
	Release bool
	// Stamp: how the stamp Patches write is judged once it landed.
	Stamp *StampWrite
	// Unheld: a held canary's stamp without its hold, written instead when
	// the API server rejects the hold (Unheld.Rejected); nil: no hold.
	Unheld *Unheld
	// Written: the record to tell the scheduler of once written
	// (Scheduler.CanaryWritten): a canary's pass, a close.
	Written *Record
	// Effects: the counters, logs and events once the patches landed.
	Effects
	// Undo: the failed rollout's undo (nil: none).
	Undo *Undo
	// Wake: workloads next in the wave, to wake once the patches landed.
	Wake []Key
}

// Decide is the one question the reconciler asks about a workload: the
// wave's rules (Rules, a pure function) say which row of the Lifecycle
// applies, the scheduler takes it, keeping its own state (the wave's
// order, debounce windows, slots granted, workloads told of a halt), and
// the decision gets every effect of it (Policy.effects).
func (s *Scheduler) Decide(ctx context.Context, o Observation) (Decision, error) {
	sit := s.situation(ctx, o)
	ruling := Rules(sit, s.Policy)
	d, err := s.take(ctx, sit, ruling)
	if err != nil {
		return d, err
	}
	if ruling.Recheck > 0 && (d.After == 0 || ruling.Recheck < d.After) {
		d.After = ruling.Recheck
	}
	return s.Policy.effects(sit, d), nil
}

// take is the ruling as the scheduler takes it, with its own state.
func (s *Scheduler) take(ctx context.Context, sit Situation, ruling Ruling) (Decision, error) {
	o := sit.Observation
	d := Decision{Transition: ruling.Transition, On: ruling.On, Record: ruling.Record, Judged: sit.Record, Causes: sit.Causes,
		Failure: ruling.Failure, After: ruling.After}
	closes := ruling.Transition.closes()
	if !sit.Record.Open() || closes {
		s.forgetProgress(o.Key)
	}
	s.suspect(o.Key, sit.Record, ruling.Suspect && !closes, sit.Now)
	switch ruling.Transition {
	case Gone:
		s.settle(o.Key, time.Time{})
		s.Done(o.Key)
	case Settle:
		s.settle(o.Key, o.ReadAt)
	case CloseCompleted, CloseFailed:
		// The slot stays counted until the cache shows the closed record (it
		// is read from the open records there), so the halt a failure writes
		// is known before the next in the wave may take the slot.
		s.Done(o.Key)
		d.Wake = s.Next(ctx, max(2, s.Policy.MaxConcurrent))
		if ruling.Transition == CloseFailed && ruling.Record != nil && ruling.Record.Hold != "" && sit.Record.Undo == "" {
			d.Record, d.Hold = frozen(o, *ruling.Record)
			if len(d.Hold) > 0 {
				d.Failure += "; its rollout is paused (spec.paused) so that no other pod gets the change, and put back when the halt lifts"
			}
		}
	case PassCanary: // passed once the reconciler wrote it (CanaryWritten)
		d.Wake = s.Next(ctx, max(2, s.Policy.MaxConcurrent))
	case Gate:
		return s.gate(ctx, sit, ruling.After)
	}
	return d, nil
}

// frozen is the failed record rec of a held canary with its kind's freeze
// added to its hold (Behavior.Freeze), and the fields the freeze sets: its
// controller makes no second pod of the bad change, whatever its pod's
// availability shows. A user's edit of a held field since stands.
func frozen(o Observation, rec Record) (*Record, workload.Hold) {
	held, err := workload.DecodeHold(rec.Hold)
	freeze := o.Kind.Freeze(o.Object)
	if err != nil || len(freeze) == 0 {
		return &rec, nil
	}
	rec.Hold = held.With(freeze).Encode()
	return &rec, freeze
}

// situation is o with what the rules weigh besides: its record (unsealed),
// the changes it would roll out, the time, and whether this process stamped
// it without the cache showing that yet.
func (s *Scheduler) situation(ctx context.Context, o Observation) Situation {
	sit := Situation{Observation: o, Now: s.now()}
	if o.Object == nil {
		return sit
	}
	if ring, ok := s.Rings.Of(ctx, o.Key.Namespace); ok {
		sit.Ring = strconv.Itoa(ring)
	}
	var err error
	if sit.Record, err = Unseal(o.Object, s.Keys); err != nil {
		// Written or altered by someone else (or sealed with a key long
		// retired): it holds no slot and halts nothing. Removing the halted
		// annotation, the documented resume, lands here too.
		log.FromContext(ctx).V(1).Info("rollout record not sealed by configstamp; ignored", "why", err.Error())
		sit.Stray = StrayHold(o.Object)
	}
	if o.Need == NeedsRollout {
		sit.Causes = Causes(o.Object.GetAnnotations(), o.Sources)
		sit.RotationRest = sit.rotationRest()
	}
	sit.Stamping = s.stamping(o.Key)
	if sit.Record.Open() {
		sit.Progressed = s.progressed(o.Key, o.Kind.Status(o.Object).Mark, sit.Now, o.Verification)
	}
	return sit
}

// prevHold is the hold an earlier rollout left set: its sealed record's,
// or the one a record no longer sealed left (Stray).
func (sit Situation) prevHold() (workload.Hold, error) {
	prev, err := workload.DecodeHold(sit.Record.Hold)
	if len(prev) == 0 && err == nil {
		return sit.Stray, nil
	}
	return prev, err
}

// idle: its workload can make no pod of a new template now, as it will be
// once the stamp puts back what an earlier canary of configstamp's set
// (workload.Status.Idle of the thawed object).
func (sit Situation) idle() bool { return sit.status().Idle() }

// status is the workload's status as it will be once the stamp puts back
// what an earlier canary of configstamp's set: its user's pause, not
// configstamp's freeze.
func (sit Situation) status() workload.Status {
	prev, _ := sit.prevHold() // sealed: configstamp's own
	return sit.Kind.Status(prev.Thawed(sit.Object))
}

// gate lets a rollout start only when its change is not halted, its debounce
// window has passed and, unless it supersedes its own rollout under way (it
// is being followed: the rollout is judged again by then), a slot is granted.
func (s *Scheduler) gate(ctx context.Context, sit Situation, following time.Duration) (Decision, error) {
	// A change that supersedes the rollout under way keeps its slot, but
	// only within the bound of the stamp that first took it: past it, the
	// new rollout asks for a slot like any other (no tenant holds one
	// forever by changing its config again and again).
	keeps := following > 0 && s.holdsSlot(sit.Record, sit.Object, sit.Now)
	d, open, canary, err := s.open(ctx, sit, keeps)
	d.Transition, d.On = Wait, NeedRollout
	if !open || err != nil {
		if following > 0 && (d.After == 0 || d.After > following) {
			d.After = following // the rollout under way is judged by its deadline meanwhile
		}
		return d, err
	}
	d = Decision{Transition: Stamp, On: NeedRollout, Supersedes: keeps, Judged: sit.Record, Causes: sit.Causes}
	if s.Policy.Tracks() {
		start := sit.Record.StartRecord(sit.Now, sit.Causes, sit.idle())
		if keeps {
			start.Started = sit.Record.Started // the slot's bound counts from the first stamp
		}
		if canary {
			prev, _ := sit.prevHold() // sealed: configstamp's own
			d.Hold = sit.Kind.Hold(prev.Thawed(sit.Object), sit.VerifyWindow).Carry(prev, sit.Object)
			start = start.AsCanary(d.Hold.Encode())
		}
		d.Record = &start
	}
	return d, nil
}

// open: the gate's checks in order; true when the rollout may start now,
// and whether it is its change's canary.
func (s *Scheduler) open(ctx context.Context, sit Situation, supersedes bool) (Decision, bool, bool, error) {
	o := sit.Observation
	if d, halted, err := s.checkHalt(ctx, sit); halted || err != nil {
		return d, false, false, err
	}
	if wait := s.suspected(o.Key, sit.Causes, sit.Now); wait > 0 {
		return Decision{After: wait}, false, false, nil
	}
	wait := s.Debounce(o.Key, o.Hash, o.Window, o.Priority, sit.together())
	// Paused by its user (not by its failed canary's freeze, which its
	// stamp puts back), or with nothing to roll (no replicas, OnDelete, a
	// partition that holds every pod), it makes no pod of the change now:
	// it is never the change's canary (a canary passes only on a judged
	// pod), and it waits for the one that will be.
	st := sit.status()
	idle := st.Idle()
	s.wants(o.Key, sit.Causes, st)
	if wait > 0 {
		return Decision{After: wait}, false, false, nil
	}
	if wait, err := s.ringWait(ctx, o.Key, sit.Causes); err != nil || wait > 0 { // a ring below rolls it out first
		return Decision{After: wait}, false, false, err
	}
	canaries := o.Canary && s.Policy.Canary && s.Policy.Tracks()
	if canaries && st.Dormant() { // its pods, when they come, would run the change untried
		if unpassed, err := s.Unpassed(ctx, o.Key, sit.Causes); err != nil || unpassed {
			return Decision{After: dormantWait}, false, false, err
		}
	}
	if canaries { // another's canary of the change runs, or comes first: wait for it
		if wait, err := s.CanaryAhead(ctx, o.Key, o.Priority, sit.Causes, idle); err != nil || wait > 0 {
			return Decision{After: wait}, false, false, err
		}
	}
	if supersedes { // its rollout holds a slot already, and keeps it
		canary, wait, err := s.claim(ctx, o, sit.Causes, canaries, idle)
		if err != nil || wait > 0 {
			return Decision{After: wait}, false, false, err
		}
		s.Forget(o.Key)
		return Decision{}, true, canary, nil
	}
	// A rollout that makes no pod now, or that nobody follows, holds no slot.
	needsSlot := !idle && s.Policy.Tracks()
	wait, err := s.Acquire(ctx, o.Key, o.Priority, needsSlot)
	if err != nil || wait > 0 {
		return Decision{After: wait}, false, false, err
	}
	// The slot may be free because a rollout of this very change just
	// failed: its close and its halt reach the cache in one update, which may
	// have landed after the look above. Look again now that the slot is ours.
	if d, halted, err := s.checkHalt(ctx, sit); halted || err != nil {
		s.Done(o.Key)
		return d, false, false, err
	}
	if wait := s.suspected(o.Key, sit.Causes, sit.Now); wait > 0 {
		s.Release(o.Key)
		return Decision{After: wait}, false, false, nil
	}
	canary, wait, err := s.claim(ctx, o, sit.Causes, canaries, idle)
	if err != nil || wait > 0 {
		s.Release(o.Key)
		return Decision{After: wait}, false, false, err
	}
	return Decision{}, true, canary, nil
}

// claim: whether o is its change's canary, or how long it waits for
// another's (ClaimCanary), when canaries apply to it.
func (s *Scheduler) claim(ctx context.Context, o Observation, causes []Change, canaries, idle bool) (bool, time.Duration, error) {
	if !canaries {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.claimed(o.Key) // neither a canary nor waiting for one
		return false, 0, nil
	}
	return s.ClaimCanary(ctx, o.Key, o.Priority, causes, idle)
}

// checkHalt reports whether one of the changes is halted, and notes that the
// workload waits on it (news: Decision.Halted, to tell once).
func (s *Scheduler) checkHalt(ctx context.Context, sit Situation) (Decision, bool, error) {
	halted := ""
	var err error
	if s.Halts != nil {
		halted, err = s.Halts.By(ctx, sit.Key.Namespace, sit.Causes)
	}
	if err != nil || halted == "" {
		s.ClearHalted(sit.Key)
		return Decision{}, false, err
	}
	d := Decision{After: haltedRecheck}
	if s.NoteHalted(sit.Key, halted, sit.Priority) {
		d.Halted = halted
	}
	// Lifting a halt wakes its waiters at once (Lifted); a lift that lands
	// between the read above and NoteHalted would be missed, so a halted
	// workload also asks again now and then.
	return d, true, nil
}

// settle: k needs no rollout now, as its sources read at readAt say.
func (s *Scheduler) settle(k Key, readAt time.Time) {
	s.forgetRead(k, readAt)
	s.ClearHalted(k)
}
