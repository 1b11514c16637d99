package rollout

import (
	"fmt"
	"strings"
)

// The rollout lifecycle in one table: a workload's record is in a State
// (none, rolling, verifying, completed, failed, idle); what the reconciler
// observed of it is a Trigger; the wave's rules (Rules, then the gate)
// pick the Transition of the row that applies, and Decide fills in its
// effects. Lifecycle lists every row; TestLifecycle walks it, and fails
// when Decide takes a transition, or has an effect, the table does not say.

// Trigger is what the reconciler observed of a workload that moves its
// rollout along: what its data asks for (NeedOf), and what its open
// rollout's status and pods show (Judge).
type Trigger int

const (
	// NeedNothing: the workload is up to date.
	NeedNothing Trigger = iota
	// NeedRecord: write the metadata record only (a baseline, a re-baseline
	// after a key change, or bookkeeping); no rollout.
	NeedRecord
	// NeedRollout: the data it references changed since its pods were made.
	NeedRollout
	// Deleted: the workload is gone.
	Deleted
	// NotOurs: neither opted in nor selected by a rollout selector.
	NotOurs
	// CacheBehind: read from a cache behind a write (its record names newer
	// sources, or this process stamped it already).
	CacheBehind
	// Progressing: its open rollout is still rolling or verifying; judged
	// again on the next status change or at Judgement.Recheck. What the
	// data asks for then decides (a Follow, or a superseding Gate).
	Progressing
	// RolloutComplete: complete as `kubectl rollout status` says, with a
	// window to verify.
	RolloutComplete
	// RolloutVerified: complete, and (with a window) stayed healthy through it.
	RolloutVerified
	// RolloutFailed: its open rollout failed (Judgement.Reason says why).
	RolloutFailed
	// Crashed: completed while its change still rolls to other workloads,
	// and a pod of it crashed.
	Crashed
	// CanaryHealthy: its canary, held at one new pod, stayed healthy for
	// the window.
	CanaryHealthy
	// Recovered: failed and halting its change, complete again and healthy
	// for a full window.
	Recovered
	// MakesPods: its Idle rollout's workload can make pods now (resumed,
	// scaled up, its partition lowered).
	MakesPods
)

var triggerNames = [...]string{"NeedNothing", "NeedRecord", "NeedRollout", "Deleted", "NotOurs", "CacheBehind", "Progressing",
	"RolloutComplete", "RolloutVerified", "RolloutFailed", "Crashed", "CanaryHealthy", "Recovered", "MakesPods"}

func (t Trigger) String() string {
	if int(t) < len(triggerNames) {
		return triggerNames[t]
	}
	return fmt.Sprintf("Trigger(%d)", int(t))
}

// Transition is what a Decision does: one per row kind of Lifecycle.
type Transition int

const (
	// Wait: a rollout is wanted and the gate (halt, debounce, canary,
	// budget, rate) says not yet; ask again after Decision.After.
	Wait Transition = iota
	// Gone: the workload is gone; forget it and free any slot it held.
	Gone
	// Resume: failed, halting its change, and recovered: lift the halt.
	Resume
	// CloseCompleted: its rollout completed (verified): close the record
	// and wake the next in the wave.
	CloseCompleted
	// CloseFailed: its rollout failed: close the record with the halt in
	// the same patch, tell, undo if asked, and wake the next in the wave.
	CloseFailed
	// StartVerify: complete as `kubectl rollout status` says: write that it
	// is verifying, until when; it keeps its slot.
	StartVerify
	// Follow: its rollout is under way and nothing new asks for another:
	// judge it again by its deadline.
	Follow
	// Settle: nothing to roll out; forget that it ever waited.
	Settle
	// Stale: read from a cache behind a write: look again shortly.
	Stale
	// Baseline: write the data record only, no rollout.
	Baseline
	// Gate: a rollout is wanted (Rules' answer only: Decide makes it Stamp
	// or Wait).
	Gate
	// Stamp: stamp the pod template with the data record and the rollout's
	// start in one patch.
	Stamp
	// PassCanary: its change's canary, held at one new pod, passed: put the
	// hold back and wake the rest of the wave.
	PassCanary
	// Unidle: an Idle rollout's workload makes pods of it now: write it
	// Rolling from now, judged like any rollout (it counts in the budget;
	// its own controller did not wait for a slot).
	Unidle
)

var transitionNames = [...]string{"Wait", "Gone", "Resume", "CloseCompleted", "CloseFailed", "StartVerify", "Follow", "Settle", "Stale",
	"Baseline", "Gate", "Stamp", "PassCanary", "Unidle"}

func (t Transition) String() string {
	if int(t) < len(transitionNames) {
		return transitionNames[t]
	}
	return fmt.Sprintf("Transition(%d)", int(t))
}

// closes reports whether t ends the rollout under way.
func (t Transition) closes() bool { return t == CloseCompleted || t == CloseFailed }

// Row is one row of the lifecycle: from a record state, on a trigger, when
// a condition holds, the transition taken, the record state it writes, and
// its effects (as Summary names them).
type Row struct {
	From []State // nil: any state
	On   Trigger
	When string // the condition besides From and On ("": none)
	Transition
	To      string // the record state written; "" when no record is written
	Effects Summary
}

// Summary names a decision's effects: what it writes, the reasons of its
// events, the counters it increments, whether it undoes, and what it does
// with its slot.
type Summary struct {
	Writes []string
	Events []string
	Counts []string
	Undo   bool
	Slot   string // "takes", "keeps", "frees", or ""
}

func (s Summary) String() string {
	var parts []string
	add := func(what string, v []string) {
		if len(v) > 0 {
			parts = append(parts, what+" "+strings.Join(v, "+"))
		}
	}
	add("writes", s.Writes)
	add("events", s.Events)
	add("counts", s.Counts)
	if s.Undo {
		parts = append(parts, "undo")
	}
	if s.Slot != "" {
		parts = append(parts, s.Slot+" slot")
	}
	return strings.Join(parts, "; ")
}

// Written parts of a Patch (Patch.Writes).
const (
	WriteRecord     = "record"      // the rollout record, sealed
	WriteDataRecord = "data-record" // applied-hash, sources, source-versions, key id
	WriteStamp      = "stamp"       // the pod template's stamp
	WriteHold       = "hold"        // the canary's hold set
	WriteHoldBack   = "hold-back"   // the canary's hold put back
)

var (
	open   = []State{Rolling, Verifying}
	closed = []State{None, Completed, Failed, Idle}
)

// Lifecycle is the rollout lifecycle, every row. Effects are those of the
// plain case the row's When names (halting on, no canary, no undo asked);
// Decide's table test covers the variants.
var Lifecycle = []Row{
	{On: Deleted, Transition: Gone, Effects: Summary{Slot: "frees"}},
	{From: []State{Failed}, On: Recovered, When: "halting; healthy for a full window", Transition: Resume, To: "failed, halt lifted",
		Effects: Summary{Writes: []string{WriteRecord}, Events: []string{ReasonRolloutRecovered}}},
	{From: []State{Completed}, On: Crashed, When: "its change still rolls elsewhere", Transition: CloseFailed, To: string(Failed),
		Effects: Summary{Writes: []string{WriteRecord}, Events: []string{ReasonRolloutFailed, ReasonRolloutFailed}, Counts: []string{MetricFailed}}},
	{From: []State{Rolling}, On: CanaryHealthy, When: "its canary, held at one pod", Transition: PassCanary, To: "rolling, canary passed",
		Effects: Summary{Writes: []string{WriteRecord, WriteHoldBack}, Events: []string{ReasonCanaryPassed}, Counts: []string{MetricCanaries + "{passed}"}}},
	{From: []State{Rolling}, On: RolloutComplete, When: "its canary, held at one pod", Transition: Follow, Effects: Summary{Slot: "keeps"}},
	{From: []State{Rolling}, On: RolloutVerified, When: "its canary, held at one pod", Transition: Follow, Effects: Summary{Slot: "keeps"}},
	{From: []State{Rolling}, On: RolloutComplete, Transition: StartVerify, To: string(Verifying),
		Effects: Summary{Writes: []string{WriteRecord}, Slot: "keeps"}},
	{From: open, On: RolloutVerified, Transition: CloseCompleted, To: string(Completed),
		Effects: Summary{Writes: []string{WriteRecord}, Counts: []string{MetricCompleted}, Slot: "frees"}},
	{From: open, On: RolloutFailed, When: "halting", Transition: CloseFailed, To: string(Failed),
		Effects: Summary{Writes: []string{WriteRecord}, Events: []string{ReasonRolloutFailed, ReasonRolloutFailed}, Counts: []string{MetricFailed}, Slot: "frees"}},
	{From: open, On: RolloutVerified, When: "an undo's own rollout: closed back into the failure it undid", Transition: CloseCompleted, To: string(Failed),
		Effects: Summary{Writes: []string{WriteRecord}, Events: []string{ReasonUndoVerified}, Counts: []string{MetricUndos + "{verified}"}, Slot: "frees"}},
	{From: open, On: RolloutFailed, When: "an undo's own rollout: never undone again", Transition: CloseFailed, To: string(Failed),
		Effects: Summary{Writes: []string{WriteRecord}, Events: []string{ReasonUndoFailed}, Counts: []string{MetricUndos + "{failed}"}, Slot: "frees"}},
	{From: open, On: NeedNothing, When: "still progressing", Transition: Follow, Effects: Summary{Slot: "keeps"}},
	{From: open, On: NeedRecord, When: "still progressing", Transition: Follow, Effects: Summary{Slot: "keeps"}},
	{On: NotOurs, When: "opted out, a canary's hold in its spec: put back, the record kept without it", Transition: Settle,
		Effects: Summary{Writes: []string{WriteRecord, WriteHoldBack}, Events: []string{ReasonHoldReleased}}},
	{From: open, On: NotOurs, When: "still progressing", Transition: Follow, Effects: Summary{Slot: "keeps"}},
	{On: NotOurs, Transition: Settle},
	{On: CacheBehind, Transition: Stale},
	{From: closed, On: NeedNothing, Transition: Settle},
	{From: closed, On: NeedNothing, When: "its failed canary's pause, its halt removed by hand", Transition: Settle,
		Effects: Summary{Writes: []string{WriteHoldBack}, Events: []string{ReasonPauseLifted}}},
	{From: closed, On: NeedRecord, Transition: Baseline, Effects: Summary{Writes: []string{WriteDataRecord}}},
	{From: []State{Idle}, On: MakesPods, When: "resumed or scaled up", Transition: Unidle, To: string(Rolling),
		Effects: Summary{Writes: []string{WriteRecord}, Slot: "takes"}},
	{On: NeedRollout, When: "the gate is open, the workload idle (paused, no replicas)", Transition: Stamp, To: string(Idle),
		Effects: Summary{Writes: []string{WriteDataRecord, WriteRecord, WriteStamp}, Events: []string{ReasonConfigChanged}, Counts: []string{MetricStarted}}},
	{On: NeedRollout, When: "the gate is open", Transition: Stamp, To: string(Rolling),
		Effects: Summary{Writes: []string{WriteDataRecord, WriteRecord, WriteStamp}, Events: []string{ReasonConfigChanged}, Counts: []string{MetricStarted}, Slot: "takes"}},
	{On: NeedRollout, When: "its change is halted", Transition: Wait, Effects: Summary{Events: []string{ReasonRolloutHalted}}},
	{On: NeedRollout, When: "debounce, canary, budget or rate", Transition: Wait},
}

// Applies reports whether the row applies to a record in state from on
// trigger on, taking transition t.
func (r Row) Applies(from State, on Trigger, t Transition) bool {
	if r.On != on || r.Transition != t {
		return false
	}
	if r.From == nil {
		return true
	}
	for _, s := range r.From {
		if s == from {
			return true
		}
	}
	return false
}

// String is the row as a line of the printed table.
func (r Row) String() string {
	from := "any"
	if r.From != nil {
		names := make([]string, len(r.From))
		for i, s := range r.From {
			names[i] = string(s)
			if s == None {
				names[i] = "none"
			}
		}
		from = strings.Join(names, "|")
	}
	when := ""
	if r.When != "" {
		when = " (" + r.When + ")"
	}
	to := ""
	if r.To != "" {
		to = " → " + r.To
	}
	return fmt.Sprintf("%-26s %-16s%s ⇒ %s%s: %s", from, r.On, when, r.Transition, to, r.Effects)
}
