package rollout

import (
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// Event reasons of the rollout lifecycle.
const (
	ReasonConfigChanged    = "ConfigChanged"
	ReasonRolloutFailed    = "RolloutFailed"
	ReasonRolloutHalted    = "RolloutHalted"
	ReasonRolloutRecovered = "RolloutRecovered"
	// ReasonCanaryPassed: the change's canary passed; its wave goes on.
	ReasonCanaryPassed = "CanaryPassed"
	// ReasonStampDropped: the API server pruned the stamp (StampWrite.Landed).
	ReasonStampDropped = "StampDropped"
	// ReasonHoldRejected: the API server rejected a canary's hold; the
	// stamp was written without it (Unheld).
	ReasonHoldRejected = "HoldRejected"
	// ReasonPauseLifted: a failed canary's pause put back once its halt
	// was removed by hand (Situation.Stray).
	ReasonPauseLifted = "PauseLifted"
	// ReasonHoldReleased: a canary's hold put back because its workload
	// opted out (released).
	ReasonHoldReleased = "HoldReleased"
)

// Event is one Kubernetes event a decision emits about the workload, or
// about one of its sources (Source set; the workload is then its related
// object).
type Event struct {
	Type, Reason, Action, Message string
	Source                        *stamp.ObjectRef
}

// Log is one line a decision logs: at V(V) as information, or as an error
// when Err is set.
type Log struct {
	V      int
	Msg    string
	Err    error
	Values []any
}

// Effects are what a decision tells: the counters it increments, the lines
// it logs and the events it emits, in that order.
type Effects struct {
	Counts []Count
	Logs   []Log
	Events []Event
}

func (e *Effects) count(metric string, labels ...string) {
	e.Counts = append(e.Counts, Count{Metric: metric, Labels: labels})
}

func (e *Effects) log(v int, msg string, values ...any) {
	e.Logs = append(e.Logs, Log{V: v, Msg: msg, Values: values})
}

func (e *Effects) event(typ, reason, action, format string, args ...any) {
	e.Events = append(e.Events, Event{Type: typ, Reason: reason, Action: action, Message: fmt.Sprintf(format, args...)})
}

func (e *Effects) add(more Effects) {
	e.Counts = append(e.Counts, more.Counts...)
	e.Logs = append(e.Logs, more.Logs...)
	e.Events = append(e.Events, more.Events...)
}

// Patch is one JSON merge patch of the workload: its metadata annotations
// (a nil value deletes one) and other fields besides (the stamp, a
// canary's hold). Judged: on the version of the workload that was judged
// only (a resourceVersion precondition); a conflict there means a stale
// read, and nothing was written.
type Patch struct {
	Meta   map[string]any
	Spec   map[string]any
	Judged bool
	// Writes name what it writes (WriteRecord, WriteStamp, ...).
	Writes []string
}

// StampWrite is what a stamp write is judged by once it landed: the API
// server returns the template the webhook left, which may keep the stamp
// there or correct the proposed one (its consistent read is newer than
// this cache).
type StampWrite struct {
	Kind               string
	TemplateFields     []string
	Proposed, Previous string
	Supersedes         bool
	Causes             []Change
	// then: the end of the ConfigChanged event's text (superseding, canary).
	then string
}

// Landed is what the stamp write did, judged from tmpl, the pod template
// as the API server returned it: rolled when the template changed (the
// proposed stamp, or a newer one the webhook read), with its effects; an
// error when a pinned workload's webhook kept the old stamp (a snapshot
// could not be made: retried with the controller's backoff).
func (w *StampWrite) Landed(tmpl *corev1.PodTemplateSpec) (Effects, bool, error) {
	var e Effects
	var kept string
	if tmpl != nil {
		kept = tmpl.Annotations[stamp.AnnotationHash]
	}
	if kept != w.Proposed {
		e.log(1, "webhook corrected a stale hash", "proposed", w.Proposed, "kept", kept)
	}
	switch {
	case kept == "":
		// The patch succeeded, yet the template carries no stamp: the API
		// server pruned it (a CRD whose schema drops unknown fields of the
		// template's metadata). Nothing can roll this workload; say so.
		e.event(corev1.EventTypeWarning, ReasonStampDropped, "Rollout",
			"the API server dropped %s from %s.metadata.annotations: this kind's CRD prunes the pod template's metadata, so configstamp cannot roll it "+
				"(keep the template's metadata in the CRD schema, e.g. controller-gen crd:generateEmbeddedObjectMeta=true)",
			stamp.AnnotationHash, strings.Join(w.TemplateFields, "."))
		return e, false, nil
	case kept == w.Previous && kept != w.Proposed: // the stamp stands: nothing rolled
		if pin.Pinned(tmpl) != nil {
			// A snapshot could not be made (the webhook's PinFailed event
			// says why): retried with the controller's backoff.
			return e, false, fmt.Errorf("the webhook kept the stamp %s: the new snapshot could not be made", w.Previous)
		}
		return e, false, nil
	}
	// The proposed hash, or a newer one than this cache knows: it rolled,
	// with the open record written by the same patch.
	e.count(MetricStarted, w.Kind)
	names := make([]string, len(w.Causes))
	for i, c := range w.Causes {
		names[i] = c.Ref.String()
	}
	what := strings.Join(names, ", ")
	if what == "" {
		what = "referenced data"
	}
	e.log(0, "rolling out for changed configuration", "changed", names, "hash", kept, "previous", w.Previous, "supersedes", w.Supersedes)
	e.event(corev1.EventTypeNormal, ReasonConfigChanged, "Rollout",
		"%s changed: pod template stamped with %s=%s%s", what, stamp.AnnotationHash, kept, w.then)
	return e, true, nil
}

// effects fills in what d writes and tells, for the situation it was
// decided on: the patches, the events, the counters, the logs, the undo.
func (p Policy) effects(sit Situation, d Decision) Decision {
	o := sit.Observation
	switch d.Transition {
	case Wait:
		if d.Halted != "" {
			d.event(corev1.EventTypeWarning, ReasonRolloutHalted, "Wait",
				"not rolling out: the change %s failed on another workload; the halt lifts when what that workload references of the source changes again, "+
					"or when that workload recovers, is deleted, or loses its %s annotation", d.Halted, AnnotationHalted)
		}
	case Resume:
		d.Patches = []Patch{d.recordPatch(sit, false)}
		d.log(0, "failed workload recovered; halt lifted", "halted", d.Record.Halted)
		d.event(corev1.EventTypeNormal, ReasonRolloutRecovered, "Resume",
			"the workload is complete again: the halt of %s is lifted and its rollout to other workloads resumes", d.Record.Halted)
	case PassCanary:
		d.Patches, d.Written = []Patch{d.recordPatch(sit, true)}, d.Record
		d.count(MetricCanaries, "passed", o.Kind.Name)
		d.log(0, "canary passed; the change rolls on", "cause", d.Judged.Cause, "elapsed", elapsed(d.Judged, sit.Now))
		d.event(corev1.EventTypeNormal, ReasonCanaryPassed, "Canary",
			"the canary of %s passed: its first new pod stayed healthy for %v; the rest of this workload and the other workloads of the change roll on",
			d.Judged.Cause, o.VerifyWindow)
	case CloseCompleted, CloseFailed:
		if d.Judged.Undo == "" {
			return p.closed(sit, d)
		}
		// An undo's own rollout closes back into the failure it undid
		// (Record.Complete, Record.Fail): told as the undo's end alone.
		d.Patches, d.Written = []Patch{d.recordPatch(sit, true)}, d.Record
		d.add(undoClosed(o.Kind.Name, d.Judged, d.Failure, sit.Now))
	case Unidle:
		d.Patches = []Patch{d.recordPatch(sit, true)}
		d.log(0, "its workload makes pods of the change now: judged from now", "cause", d.Judged.Cause, "stamped", d.Judged.Started.UTC().Format(time.RFC3339))
	case StartVerify:
		d.Patches = []Patch{d.recordPatch(sit, true)}
		d.log(0, "rollout complete; verifying that it stays healthy", "until", d.Record.Until.UTC().Format(time.RFC3339),
			"elapsed", elapsed(d.Judged, sit.Now))
	case Settle:
		if d.Record != nil { // released
			d.Patches = []Patch{d.recordPatch(sit, true)}
			held, _ := workload.DecodeHold(d.Judged.Hold)
			d.log(0, "no longer looked after: the canary's hold put back", "hold", d.Judged.Hold)
			d.event(corev1.EventTypeNormal, ReasonHoldReleased, "Release",
				"configstamp no longer looks after this workload (it opted out): it put back what it set on this spec for its canary (%s)",
				strings.Join(held.Paths(), ", "))
		}
		if d.On == NeedNothing && len(sit.Stray) > 0 {
			d.Patches = []Patch{thawPatch(sit)}
			d.log(0, "halt removed: the failed canary's hold and pause put back", "hold", sit.Stray.Encode())
			d.event(corev1.EventTypeNormal, ReasonPauseLifted, "Resume",
				"its halt was removed (kubectl configstamp resume, or the %s annotation deleted): configstamp put back what it set on this spec when its canary ran and failed (%s)",
				AnnotationHalted, strings.Join(sit.Stray.Paths(), ", "))
		}
	case Baseline:
		d.Patches = []Patch{{Meta: dataRecord(o.Data), Writes: []string{WriteDataRecord}}}
		d.log(1, "recorded hash", "hash", o.Data.Hash, "baseline", currentStamp(o) == "")
	case Stamp:
		d.Patches, d.Stamp, d.Release = []Patch{d.stampPatch(sit)}, d.stampWrite(o), !d.Supersedes
		if missing := sit.RotationRest; len(missing) > 0 {
			d.event(corev1.EventTypeWarning, ReasonRotationIncomplete, "Rollout",
				"rolling out %s without %s, which did not change within %v (%s): its new pods get the new values of some of the sources that change together and the old values of the rest",
				stamp.JoinRefs(refsOf(sit.Causes)), stamp.JoinRefs(missing), o.Rotation.Wait, AnnotationRotateTogetherWait)
		}
		if len(d.Hold) > 0 && d.Record != nil {
			d.Unheld = d.unheld(sit)
		}
	}
	return d
}

// Unheld is a held canary's stamp without its hold: the workload is then
// its change's canary whole (no other workload gets the change before its
// whole rollout completed and was verified). A hold is computed within the
// API's own rules (workload.HeldMinReady), but a cluster's admission
// policy (a ValidatingAdmissionPolicy, Kyverno, Gatekeeper) may forbid the
// fields it sets: the stamp must not wait on that.
type Unheld struct {
	Patch Patch
	Stamp *StampWrite
}

// unheld is d's stamp without its hold.
func (d Decision) unheld(sit Situation) *Unheld {
	u := d
	u.Hold = nil
	rec := d.Record.AsCanary("")
	u.Record = &rec
	return &Unheld{Patch: u.stampPatch(sit), Stamp: u.stampWrite(sit.Observation)}
}

// HoldRejected reports whether err, the answer to a stamp write with a
// canary's hold, is the API server refusing what was written (validation,
// an admission policy or webhook), not a failure to write at all.
func HoldRejected(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsForbidden(err) || apierrors.IsBadRequest(err)
}

// Rejected is what the hold's rejection tells: a Warning event with the
// API server's answer, and a count.
func (u *Unheld) Rejected(err error) Effects {
	var e Effects
	e.count(MetricCanaries, "unheld", u.Stamp.Kind)
	e.log(0, "the API server rejected the canary's hold; stamping without it", "error", err.Error())
	e.event(corev1.EventTypeWarning, ReasonHoldRejected, "Canary",
		"the API server rejected the fields configstamp sets to hold this canary at one new pod (%v): stamped without them, "+
			"so this whole workload is its change's canary, judged before any other workload gets the change", err)
	return e
}

// closed fills in the effects of a rollout's close (not an undo's own).
func (p Policy) closed(sit Situation, d Decision) Decision {
	o := sit.Observation
	switch d.Transition {
	case CloseCompleted:
		d.Patches, d.Written = []Patch{d.recordPatch(sit, true)}, d.Record
		if d.Judged.Canary == CanaryRunning {
			d.count(MetricCanaries, "passed", o.Kind.Name)
		}
		d.count(MetricCompleted, o.Kind.Name)
		if sit.Ring != "" {
			d.count(MetricRingRollouts, sit.Ring, "completed")
		}
		d.log(0, "rollout completed", "elapsed", elapsed(d.Judged, sit.Now))
	case CloseFailed:
		d.Patches, d.Written = []Patch{d.recordPatch(sit, true)}, d.Record
		d.count(MetricFailed, o.Kind.Name)
		if sit.Ring != "" {
			d.count(MetricRingRollouts, sit.Ring, "failed")
		}
		if d.Judged.State == Verifying {
			d.count(MetricFailedVerification, o.Kind.Name)
		}
		if d.Judged.Canary == CanaryRunning {
			d.count(MetricCanaries, "failed", o.Kind.Name)
		}
		d.add(p.failure(o, d.Judged, d.Failure))
		var told Effects
		told, d.Undo = undo(o, d.Judged)
		d.add(told)
		if d.Undo == nil && o.Kind.Status(o.Object).KeepsBrokenPods {
			d.event(corev1.EventTypeWarning, ReasonFixNeedsPodDelete, "Halt",
				"with podManagementPolicy OrderedReady the StatefulSet's controller does not replace a pod of the failed revision that never becomes Ready "+
					"(kubernetes/kubernetes#67250): a fix will not reach such a pod until it is deleted (kubectl delete pod); configstamp never deletes pods")
		}
		if d.Undo != nil {
			d.Undo.Freeze = d.Hold
			d.Undo.follow(o.Object.GetUID(), *d.Record, sit.Now)
		}
	}
	return d
}

// failure is what a failed rollout tells: a log, a RolloutFailed event on
// the workload and, when it halts its change, one on each of its sources.
func (p Policy) failure(o Observation, rec Record, reason string) Effects {
	var e Effects
	halting := p.HaltOnFailure && rec.Cause != ""
	e.log(0, "rollout failed", "cause", rec.Cause, "reason", reason, "halting", halting)
	then := "; configstamp does not halt other rollouts (--halt-on-failure=false)"
	if halting {
		then = "; configstamp halts further rollouts of this change until what this workload references of the source changes again, this workload recovers or is deleted, or its " +
			AnnotationHalted + " annotation is removed"
	}
	e.event(corev1.EventTypeWarning, ReasonRolloutFailed, "Halt", "rollout for %s failed: %s%s", rec.Cause, reason, then)
	if !halting {
		return e
	}
	for _, c := range ParseChanges(rec.Cause) {
		e.Events = append(e.Events, Event{Type: corev1.EventTypeWarning, Reason: ReasonRolloutFailed, Action: "Halt", Source: &c.Ref,
			Message: fmt.Sprintf("this change made the rollout of %s %s fail; its rollout to other workloads is halted", o.Kind.Name, o.Object.GetName())})
	}
	return e
}

func elapsed(judged Record, now time.Time) string {
	return now.Sub(judged.Started).Round(time.Second).String()
}

// recordPatch writes d.Record, sealed with the key its judged record was
// unsealed with, and puts back the hold the judged record carries when
// the new one does not; judged: on the judged version only.
func (d Decision) recordPatch(sit Situation, judged bool) Patch {
	p := Patch{Meta: d.Record.Annotations(sit.Object.GetUID(), d.Record.Key()), Judged: judged, Writes: []string{WriteRecord}}
	if back := d.holdPatch(sit); back != nil {
		p.Spec, p.Writes = back, append(p.Writes, WriteHoldBack)
		if len(d.Hold) > 0 { // a failed canary's freeze
			p.Writes[len(p.Writes)-1] = WriteHold
		}
	}
	return p
}

// stampPatch stamps the template and writes the data record and the
// rollout's start (d.Record, when rollouts are followed) in one patch, on
// the judged version only: a cache behind this process's own stamp, or
// behind any other write, must not stamp again.
func (d Decision) stampPatch(sit Situation) Patch {
	o := sit.Observation
	p := Patch{Meta: dataRecord(o.Data), Judged: true, Writes: []string{WriteDataRecord}}
	if d.Record != nil {
		maps.Copy(p.Meta, d.Record.Annotations(o.Object.GetUID(), o.Data.Hasher))
		p.Writes = append(p.Writes, WriteRecord)
	}
	p.Spec, p.Writes = StampPatch(o.Kind.TemplateFields(), o.Data.Hash), append(p.Writes, WriteStamp)
	if hold := d.holdPatch(sit); hold != nil {
		p.Spec = mergePatches(p.Spec, hold)
		if len(d.Hold) > 0 {
			p.Writes = append(p.Writes, WriteHold)
		} else {
			p.Writes = append(p.Writes, WriteHoldBack)
		}
	}
	return p
}

// thawPatch puts back sit.Stray, a failed canary's hold and pause whose
// record no longer counts, and drops the hold annotation that named it; on the
// judged version only.
func thawPatch(sit Situation) Patch {
	back, _ := sit.Stray.RestorePatch(sit.Object) // not nil: see StrayHold
	return Patch{Meta: map[string]any{AnnotationHold: nil}, Spec: back, Judged: true, Writes: []string{WriteHoldBack}}
}

// stampWrite is how the stamp d writes is judged once it landed.
func (d Decision) stampWrite(o Observation) *StampWrite {
	w := &StampWrite{Kind: o.Kind.Name, TemplateFields: o.Kind.TemplateFields(), Proposed: o.Data.Hash, Previous: currentStamp(o),
		Supersedes: d.Supersedes, Causes: d.Causes}
	if d.Supersedes {
		w.then = "; this rollout supersedes the one under way, keeping its slot"
	}
	switch {
	case d.Record != nil && d.Record.Canary == CanaryRunning && len(d.Hold) > 0:
		w.then += "; this workload is the change's canary: one new pod first, judged for its verification window, before any other pod or workload gets the change"
	case d.Record != nil && d.Record.Canary == CanaryRunning:
		w.then += "; this workload is the change's canary: no other workload gets the change before its rollout completes and is verified"
	}
	return w
}

// holdPatch is what d writes of the spec besides the stamp: the canary's
// hold a Stamp sets, or the hold the judged record carries put back when
// the record d writes no longer carries it (a passed canary, a rollout
// that ends, a new rollout that is no canary). Nil: nothing.
func (d *Decision) holdPatch(sit Situation) map[string]any {
	if len(d.Hold) > 0 {
		return d.Hold.SetPatch()
	}
	if d.Record != nil && d.Record.Hold != "" {
		return nil
	}
	held, err := sit.prevHold() // d.Judged's, or Stray
	if err == nil && len(held) == 0 {
		return nil
	}
	if err == nil {
		var back map[string]any
		if back, err = held.RestorePatch(sit.Object); err == nil {
			return back
		}
	}
	d.Logs = append(d.Logs, Log{Msg: "the canary's hold cannot be put back", Err: err})
	return nil
}

// currentStamp is the stamp of o's template as observed.
func currentStamp(o Observation) string {
	if tmpl := o.Kind.PodTemplate(o.Object); tmpl != nil {
		return tmpl.Annotations[stamp.AnnotationHash]
	}
	return ""
}

// dataRecord is comp's record (workload.Computation.Record, the same the
// webhook writes) as a merge patch of the workload's annotations: an empty
// value removes the annotation.
func dataRecord(comp *workload.Computation) map[string]any {
	out := map[string]any{}
	for k, v := range comp.Record() {
		out[k] = nil
		if v != "" {
			out[k] = v
		}
	}
	return out
}

// StampPatch is the merge patch that sets the stamp on the pod template at path.
func StampPatch(path []string, hash string) map[string]any {
	var at any = map[string]any{"metadata": map[string]any{"annotations": map[string]any{stamp.AnnotationHash: hash}}}
	for i := len(path) - 1; i > 0; i-- {
		at = map[string]any{path[i]: at}
	}
	return map[string]any{path[0]: at}
}

// mergePatches merges JSON merge patches b into a (b wins; nested objects merged).
func mergePatches(a, b map[string]any) map[string]any {
	for k, v := range b {
		am, aok := a[k].(map[string]any)
		bm, bok := v.(map[string]any)
		if aok && bok {
			a[k] = mergePatches(am, bm)
			continue
		}
		a[k] = v
	}
	return a
}

// Summary names d's effects (Lifecycle's terms). A stamp's are those of a
// stamp that rolled.
func (d Decision) Summary() Summary {
	var s Summary
	for _, p := range d.Patches {
		s.Writes = append(s.Writes, p.Writes...)
	}
	e := d.Effects
	if d.Stamp != nil {
		landed, _, _ := d.Stamp.Landed(&corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{
			Annotations: map[string]string{stamp.AnnotationHash: d.Stamp.Proposed}}})
		e.add(landed)
	}
	for _, ev := range e.Events {
		s.Events = append(s.Events, ev.Reason)
	}
	for _, c := range e.Counts {
		s.Counts = append(s.Counts, c.String())
	}
	s.Undo = d.Undo != nil
	switch {
	case d.Transition == Stamp && d.Record != nil && d.Record.Open() && d.Supersedes:
		s.Slot = "keeps"
	case d.Transition == Stamp && d.Record != nil && d.Record.Open(), d.Transition == Unidle:
		s.Slot = "takes"
	case d.Transition == Gone, d.Transition.closes() && d.Judged.Open():
		s.Slot = "frees"
	case d.Transition == StartVerify, d.Transition == Follow:
		s.Slot = "keeps"
	}
	return s
}
