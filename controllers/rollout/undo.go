package rollout

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

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
	// ReasonFixNeedsPodDelete: a failed StatefulSet keeps its broken pod
	// until someone deletes it (workload.Status.KeepsBrokenPods): no fix
	// reaches that pod before.
	ReasonFixNeedsPodDelete = "FixNeedsPodDelete"
	// ReasonUndoVerified: the undo's own rollout passed verification.
	ReasonUndoVerified = "UndoVerified"
	// ReasonUndoFailed: the undo's own rollout failed too; it is not undone.
	ReasonUndoFailed = "UndoFailed"
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
	// Template is the workload's pod template read live, whole, when
	// Revision was looked for (nil: the observed one): the cache keeps a
	// slim copy (no images, resources, probes), which no revision equals,
	// and an edit of those would go unseen.
	Template *corev1.PodTemplateSpec
	// Current is TemplateDigest of Template, read when the rollout of a
	// workload that asks for undo may close as verified (MayVerify): the
	// identity its record keeps when it passes ("": not read).
	Current string
}

// VerifiedID is what a record keeps of the revision that last passed
// verification (Record.Verified): its stamp and, when it was read, a digest
// of its whole pod template (TemplateDigest). The stamp alone names every
// revision of one config: an image or env edit made after the verified
// rollout has the same stamp, and was never verified. Records written
// before the digest name the stamp only.
type VerifiedID struct {
	Stamp, Template string
}

// ParseVerified reads a record's Verified.
func ParseVerified(s string) VerifiedID {
	st, digest, _ := strings.Cut(s, ".")
	return VerifiedID{Stamp: st, Template: digest}
}

func (v VerifiedID) String() string {
	if v.Template == "" {
		return v.Stamp
	}
	return v.Stamp + "." + v.Template
}

// Names reports whether t, a revision's template or a workload's (whole,
// as read live or from a revision), is the verified one: its stamp and,
// when the digest is known, its whole template.
func (v VerifiedID) Names(t *corev1.PodTemplateSpec) bool {
	return t != nil && v.Stamp != "" && t.Annotations[stamp.AnnotationHash] == v.Stamp && (v.Template == "" || TemplateDigest(t) == v.Template)
}

// TemplateDigest is a digest of t, whole, but for the label the Deployment
// controller adds to its ReplicaSets' copies (pod-template-hash): equal for
// a workload's template and its revision's. A template is no secret (anyone
// who reads the workload reads it), so it is not keyed.
func TemplateDigest(t *corev1.PodTemplateSpec) string {
	if t == nil {
		return ""
	}
	c := t.DeepCopy()
	delete(c.Labels, appsv1.DefaultDeploymentUniqueLabelKey)
	raw, err := json.Marshal(c)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:8])
}

// Undo is the undo of a failed rollout a decision asks for: replace the
// pod template, still exactly Failed, by To (revision Revision), and put
// back in the same write what the failure froze (Freeze: a held canary's
// spec.paused), or the workload's controller would never roll To. Once it
// landed, Follow is written: the record of the undo's own rollout
// (Record.StartUndo), followed, verified and closed back into the failure
// like any rollout (undoClosed tells how it ended); it is never undone.
type Undo struct {
	Failed, To *corev1.PodTemplateSpec
	Revision   int64
	Freeze     workload.Hold
	Follow     Patch
	// kind names the workload's kind (its counters' label).
	kind string
	// keepsBrokenPods: its controller will not replace the broken pod by
	// itself (workload.Status.KeepsBrokenPods).
	keepsBrokenPods bool
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
	if rec.Undo != "" { // an undo's own rollout: never undone again (undoClosed)
		return Effects{}, nil
	}
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
	tmpl, verified := o.Kind.PodTemplate(o.Object), ParseVerified(rec.Verified)
	switch {
	case o.Kind.Unstructured():
		return impossible("%s: undo is asked, but configstamp returns only Deployments, StatefulSets and DaemonSets to a previous revision", AnnotationOnFailure)
	case len(pin.Pinned(tmpl)) == 0 || !f.Pin:
		return impossible("%s: undo is asked, but the workload is not pinned: its previous revision mounts the same ConfigMaps and Secrets, which hold the failed data now; "+
			"pin it (%s: \"true\", with pinning installed: --pin) so that its revisions keep their own snapshots", AnnotationOnFailure, pin.AnnotationPin)
	case rec.Verified == "":
		return impossible("%s: undo is asked, but no earlier revision of this workload passed configstamp's verification: configstamp returns only to a verified one",
			AnnotationOnFailure)
	case verified.Stamp == tmpl.Annotations[stamp.AnnotationHash] && (f.Template == nil || verified.Names(f.Template)):
		return impossible("%s: undo is asked, but the revision that failed is the one that last passed verification (it crashed after its window, "+
			"while its change still rolled to other workloads); configstamp keeps no earlier verified revision to return to", AnnotationOnFailure)
	case f.Err != nil || !verified.Names(f.Revision):
		return impossible("%s: undo is asked, but the last verified revision of this workload (stamp %s) is no longer kept (revisionHistoryLimit) (%v)",
			AnnotationOnFailure, verified.Stamp, f.Err)
	}
	if f.Template != nil {
		tmpl = f.Template
	}
	if edit := editedSince(tmpl, f.Revision); edit != "" {
		return impossible("%s: undo is asked, but the pod template differs from revision %d in more than configstamp's stamp and snapshots (%s): "+
			"configstamp never overwrites an edit; the change stays halted (fix it, or undo by hand)", AnnotationOnFailure, f.Number, edit)
	}
	return e, &Undo{Failed: tmpl.DeepCopy(), To: f.Revision, Revision: f.Number, kind: o.Kind.Name,
		keepsBrokenPods: o.Kind.Status(o.Object).KeepsBrokenPods}
}

// follow is the record of u's own rollout, started at now after the failure
// rec (the failed record the close writes), as the patch that writes it
// once the undo landed: on whatever version the undo left (not judged).
func (u *Undo) follow(uid types.UID, rec Record, now time.Time) {
	start := rec.StartUndo(now, u.To.Annotations[stamp.AnnotationHash])
	u.Follow = Patch{Meta: start.Annotations(uid, start.Key()), Writes: []string{WriteRecord}}
}

// undoClosed is what the close of an undo's own rollout (judged, its
// record; failure: why it failed, "" when verified) tells: UndoVerified, or
// UndoFailed, which is not undone again; the change's halt stays either
// way, and no RolloutFailed is told (the change did not fail anew).
func undoClosed(kind string, judged Record, failure string, now time.Time) Effects {
	var e Effects
	to := judged.Undo
	if failure == "" {
		e.count(MetricUndos, "verified", kind)
		e.log(0, "the undo's rollout passed verification", "stamp", to, "elapsed", elapsed(judged, now))
		e.event(corev1.EventTypeNormal, ReasonUndoVerified, "Undo",
			"the undo's rollout to the revision stamped %s completed and stayed healthy: the workload runs the config it ran before %s; "+
				"that change stays halted until it is fixed", to, judged.Cause)
		return e
	}
	e.count(MetricUndos, "failed", kind)
	e.log(0, "the undo's rollout failed", "stamp", to, "reason", failure)
	e.event(corev1.EventTypeWarning, ReasonUndoFailed, "Undo",
		"the undo's rollout to the revision stamped %s failed too: %s; configstamp does not undo it again: the workload needs a look "+
			"(the change %s stays halted)", to, failure, judged.Cause)
	return e
}

// Done is what the undo tells once it was tried: err from the write
// (ErrEditedMeanwhile: a fix or an edit won), now the template as the API
// server returned it, thawed whether the failure's freeze was put back.
// landed: the undo is in place, and its rollout is to be followed (Follow).
func (u *Undo) Done(err error, now *corev1.PodTemplateSpec, thawed bool) (e Effects, landed bool) {
	if errors.Is(err, ErrEditedMeanwhile) {
		e.event(corev1.EventTypeWarning, ReasonUndoImpossible, "Undo", "%s: undo is asked, but %v; the change stays halted", AnnotationOnFailure, err)
		return e, false
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
		return e, false
	}
	e.count(MetricUndos, "undone", u.kind)
	e.log(0, "failed rollout undone", "revision", u.Revision, "stamp", to)
	resumed := ""
	if thawed {
		resumed = " (its rollout, paused at the failed canary, is resumed for it)"
	}
	e.event(corev1.EventTypeNormal, ReasonRolloutUndone, "Undo",
		"the rollout failed: the workload is returned to its revision %d (stamp %s), whose snapshots hold the config it ran before%s; "+
			"the change stays halted until it is fixed", u.Revision, to, resumed)
	if u.keepsBrokenPods {
		// kubernetes/kubernetes#67250: with OrderedReady the controller waits
		// for the broken pod to become Ready before it replaces it, forever.
		e.event(corev1.EventTypeWarning, ReasonUndoNeedsPodDelete, "Undo",
			"the StatefulSet is returned to revision %d, but with podManagementPolicy OrderedReady its controller does not replace a pod of the failed "+
				"revision that never becomes Ready (kubernetes/kubernetes#67250): delete that pod (kubectl delete pod) for the undo to reach it; "+
				"configstamp never deletes pods", u.Revision)
	}
	return e, true
}

// MayFail reports whether a rollout whose record (as written, rec: Decide
// checks its seal) is rec may be judged failed now, its pods read as v:
// it is open, or completed and crashing while its change still rolls.
func MayFail(rec Record, v Verification) bool {
	return rec.Open() || rec.State == Completed && v.Problem != ""
}

// MayVerify reports whether a rollout whose record is rec may close as
// verified now, its pods read as v (Judge): at the end of its window, or,
// with no window, once complete. Only then does its record need the
// identity of its template (UndoFacts.Current).
func MayVerify(rec Record, v Verification) bool {
	return rec.State == Verifying || rec.Open() && v.Window == 0
}

// UndoWanted says whether reading a workload's revisions for an undo is
// worth it: it asks for undo, is pinned where pinning is installed, is of
// a kind configstamp returns, and its record (rec, as written) names a
// verified revision other than the current one to return to.
func UndoWanted(kind workload.Kind, tmpl *corev1.PodTemplateSpec, f UndoFacts, rec Record) bool {
	if !Undoable(kind, tmpl, f) || rec.Verified == "" {
		return false
	}
	// The slim template shows the stamp only: an edit since the verified
	// revision, of the same stamp, is seen in the live one (undo).
	v := ParseVerified(rec.Verified)
	return v.Stamp != tmpl.Annotations[stamp.AnnotationHash] || v.Template != ""
}

// Undoable: the workload asks for undo, is pinned where pinning is
// installed, and is of a kind configstamp returns. When its rollout may
// close as verified (MayVerify), its whole template is read
// (UndoFacts.Current), so that its record names the verified revision whole.
func Undoable(kind workload.Kind, tmpl *corev1.PodTemplateSpec, f UndoFacts) bool {
	return f.Wanted && f.Pin && !kind.Unstructured() && tmpl != nil && len(pin.Pinned(tmpl)) > 0
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
