package rollout

import (
	"errors"
	"fmt"
	"maps"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// Event reasons of the automatic undo.
const (
	// ReasonRolloutUndone: a failed pinned workload was returned to its
	// previous revision (configstamp.io/on-failure: undo).
	ReasonRolloutUndone = "RolloutUndone"
	// ReasonUndoImpossible: undo was asked for a workload it cannot help.
	ReasonUndoImpossible = "UndoImpossible"
	// ReasonUndoNeedsPodDelete: a StatefulSet returned to its previous
	// revision keeps a broken pod until someone deletes it.
	ReasonUndoNeedsPodDelete = "UndoNeedsPodDelete"
)

// UndoFacts is what the reconciler observed for the undo of a rollout that
// may fail: whether the workload asks for it (OnFailure, from the workload
// and its Namespace, with the bad values found), whether pinning is
// installed, and the revision an undo would return to.
type UndoFacts struct {
	Wanted   bool
	Problems []stamp.Problem
	// Pin: pinning is installed (--pin).
	Pin bool
	// Revision is the newest pinned revision of the workload stamped as its
	// record's last verified one (nil: none kept, or none looked for:
	// undo not asked, not pinned, or nothing verified to return to);
	// Number is its number; Err why the revisions could not be read.
	Revision *corev1.PodTemplateSpec
	Number   int64
	Err      error
}

// Undo is the undo of a failed rollout a decision asks for: replace the
// pod template, still exactly Failed, by To (revision Revision).
type Undo struct {
	Failed, To *corev1.PodTemplateSpec
	Revision   int64
	// orderedReady: a StatefulSet whose controller will not replace the
	// broken pod by itself (kubernetes/kubernetes#67250).
	orderedReady bool
}

// ErrEditedMeanwhile: the template changed since the failure was judged.
var ErrEditedMeanwhile = errors.New("the pod template was changed since the failure was judged (a fix or an edit): configstamp does not overwrite it")

// undo returns a workload whose rollout just failed (its record rec) to the
// last revision whose rollout passed verification (rec.Verified), when it
// asks for it (OnFailure): a pinned workload's revision mounts the
// snapshots it ran with, so its pods get that config back while the halt
// stays (a rolled-back pinned workload recovers nothing: pin.RolledBack).
// Never to a revision that did not pass (a change superseded while it
// rolled, an earlier failure), never over a user's edit. An unpinned
// workload's previous revision mounts the same objects, which hold the
// failed data now: undo could not help it, and a Warning says so.
func undo(o Observation, rec Record) (Effects, *Undo) {
	var e Effects
	f := o.Undo
	for _, p := range f.Problems {
		e.event(corev1.EventTypeWarning, workload.ReasonInvalidValue, "Ignore", "%s", p.String())
	}
	if !f.Wanted {
		return e, nil
	}
	impossible := func(format string, args ...any) (Effects, *Undo) {
		e.event(corev1.EventTypeWarning, ReasonUndoImpossible, "Undo", format, args...)
		return e, nil
	}
	tmpl := o.Kind.PodTemplate(o.Object)
	switch {
	case o.Kind.Unstructured():
		return impossible("%s: undo is asked, but configstamp returns only Deployments, StatefulSets and DaemonSets to a previous revision", AnnotationOnFailure)
	case len(pin.Pinned(tmpl)) == 0 || !f.Pin:
		return impossible("%s: undo is asked, but the workload is not pinned: its previous revision mounts the same ConfigMaps and Secrets, which hold the failed data now; "+
			"pin it (%s: \"true\", with pinning installed: --pin) so that its revisions keep their own snapshots", AnnotationOnFailure, pin.AnnotationPin)
	case rec.Verified == "":
		return impossible("%s: undo is asked, but no earlier revision of this workload passed configstamp's verification: configstamp returns only to a verified one",
			AnnotationOnFailure)
	case rec.Verified == tmpl.Annotations[stamp.AnnotationHash]:
		return impossible("%s: undo is asked, but the revision that failed is the one that last passed verification (it crashed after its window, "+
			"while its change still rolled to other workloads); configstamp keeps no earlier verified revision to return to", AnnotationOnFailure)
	case f.Err != nil || f.Revision == nil || f.Revision.Annotations[stamp.AnnotationHash] != rec.Verified:
		return impossible("%s: undo is asked, but the last verified revision of this workload (stamp %s) is no longer kept (revisionHistoryLimit) (%v)",
			AnnotationOnFailure, rec.Verified, f.Err)
	}
	if edit := editedSince(tmpl, f.Revision); edit != "" {
		return impossible("%s: undo is asked, but the pod template differs from revision %d in more than configstamp's stamp and snapshots (%s): "+
			"configstamp never overwrites an edit; the change stays halted (fix it, or undo by hand)", AnnotationOnFailure, f.Number, edit)
	}
	s, ok := o.Object.(*appsv1.StatefulSet)
	return e, &Undo{Failed: tmpl.DeepCopy(), To: f.Revision, Revision: f.Number,
		orderedReady: ok && s.Spec.PodManagementPolicy != appsv1.ParallelPodManagement}
}

// Done is what the undo tells once it was tried: err from the write
// (ErrEditedMeanwhile: a fix or an edit won), now the template as the API
// server returned it.
func (u *Undo) Done(err error, now *corev1.PodTemplateSpec) Effects {
	var e Effects
	if errors.Is(err, ErrEditedMeanwhile) {
		e.event(corev1.EventTypeWarning, ReasonUndoImpossible, "Undo", "%s: undo is asked, but %v; the change stays halted", AnnotationOnFailure, err)
		return e
	}
	to := u.To.Annotations[stamp.AnnotationHash]
	if kept := now.Annotations[stamp.AnnotationHash]; err == nil && kept != to {
		// The webhook kept the template: the revision's snapshots no longer
		// hold what its stamp says (its PinFailed event says why).
		err = fmt.Errorf("the webhook kept the template stamped %s", kept)
	}
	if err != nil {
		e.Logs = append(e.Logs, Log{Msg: "undo of the failed rollout", Err: err})
		e.event(corev1.EventTypeWarning, ReasonUndoImpossible, "Undo", "the undo to revision %d failed: %v", u.Revision, err)
		return e
	}
	e.log(0, "failed rollout undone", "revision", u.Revision, "stamp", to)
	e.event(corev1.EventTypeNormal, ReasonRolloutUndone, "Undo",
		"the rollout failed: the workload is returned to its revision %d (stamp %s), whose snapshots hold the config it ran before; "+
			"the change stays halted until it is fixed", u.Revision, to)
	if u.orderedReady {
		// kubernetes/kubernetes#67250: with OrderedReady the controller waits
		// for the broken pod to become Ready before it replaces it, forever.
		e.event(corev1.EventTypeWarning, ReasonUndoNeedsPodDelete, "Undo",
			"the StatefulSet is returned to revision %d, but with podManagementPolicy OrderedReady its controller does not replace a pod of the failed "+
				"revision that never becomes Ready (kubernetes/kubernetes#67250): delete that pod (kubectl delete pod) for the undo to reach it; "+
				"configstamp never deletes pods", u.Revision)
	}
	return e
}

// MayFail reports whether a rollout whose record (as written, rec: Decide
// checks its seal) is rec may be judged failed now, its pods read as v:
// it is open, or completed and crashing while its change still rolls.
func MayFail(rec Record, v Verification) bool {
	return rec.Open() || rec.State == Completed && v.Problem != ""
}

// UndoWanted says whether reading a workload's revisions for an undo is
// worth it: it asks for undo, is pinned where pinning is installed, is of
// a kind configstamp returns, and its record (rec, as written) names a
// verified revision other than the current one to return to.
func UndoWanted(kind workload.Kind, tmpl *corev1.PodTemplateSpec, f UndoFacts, rec Record) bool {
	return f.Wanted && f.Pin && !kind.Unstructured() && tmpl != nil && len(pin.Pinned(tmpl)) > 0 &&
		rec.Verified != "" && rec.Verified != tmpl.Annotations[stamp.AnnotationHash]
}

// editedSince says how failed, the template whose rollout failed, differs
// from prev, the revision an undo would return to, beyond what configstamp
// itself changed between them (its stamp and its snapshots): "" when it
// does not. A user's edit during the failing rollout (an image, resources,
// a restart annotation) is never overwritten by an undo.
func editedSince(failed, prev *corev1.PodTemplateSpec) string {
	own := func(a map[string]string) map[string]string {
		out := maps.Clone(a)
		delete(out, stamp.AnnotationHash)
		delete(out, pin.AnnotationPinned)
		return out
	}
	switch {
	case !equality.Semantic.DeepEqual(failed.Labels, prev.Labels):
		return "its labels"
	case !equality.Semantic.DeepEqual(own(failed.Annotations), own(prev.Annotations)):
		return "its annotations"
	case !equality.Semantic.DeepEqual(pin.SourceSpec(failed), pin.SourceSpec(prev)):
		return "its pod spec"
	}
	return ""
}
