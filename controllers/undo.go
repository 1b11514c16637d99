package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/rollout"
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
	// ReasonUndoVerified: the undo's own rollout passed verification.
	ReasonUndoVerified = "UndoVerified"
	// ReasonUndoFailed: the undo's own rollout failed too; it is not undone.
	ReasonUndoFailed = "UndoFailed"
)

// undoFailed returns a workload whose rollout just failed (rec, the failed
// record just written) to the last revision whose rollout passed
// verification (rec.Verified),
// when it asks for it (rollout.OnFailure): a pinned workload's revision
// mounts the snapshots it ran with, so its pods get that config back while
// the halt stays (a rolled-back pinned workload recovers nothing:
// pin.RolledBack). Never to a revision that did not pass (a change
// superseded while it rolled, an earlier failure), never over a user's
// edit. An unpinned workload's previous revision mounts the same objects,
// which hold the failed data now: undo could not help it, and a Warning
// says so. The undo's own rollout is followed like any other
// (Record.StartUndo): reportUndo tells how it ended, and it is never undone.
//
// freeze is what the failure paused (a held canary's spec.paused): the undo
// puts it back in the same write, or the workload's controller would never
// roll the restored revision.
func (r *kindReconciler) undoFailed(ctx context.Context, obj client.Object, rec rollout.Record, freeze workload.Hold) {
	if !r.wantsUndo(ctx, obj) {
		return
	}
	tmpl := r.Kind.PodTemplate(obj)
	if r.Kind.Unstructured() {
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonUndoImpossible, "Undo",
			"%s: undo is asked, but configstamp returns only Deployments, StatefulSets and DaemonSets to a previous revision", rollout.AnnotationOnFailure)
		return
	}
	if len(pin.Pinned(tmpl)) == 0 || !r.Pin {
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonUndoImpossible, "Undo",
			"%s: undo is asked, but the workload is not pinned: its previous revision mounts the same ConfigMaps and Secrets, which hold the failed data now; "+
				"pin it (%s: \"true\", with pinning installed: --pin) so that its revisions keep their own snapshots", rollout.AnnotationOnFailure, pin.AnnotationPin)
		return
	}
	switch rec.Verified {
	case "":
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonUndoImpossible, "Undo",
			"%s: undo is asked, but no earlier revision of this workload passed configstamp's verification: configstamp returns only to a verified one",
			rollout.AnnotationOnFailure)
		return
	case tmpl.Annotations[stamp.AnnotationHash]:
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonUndoImpossible, "Undo",
			"%s: undo is asked, but the revision that failed is the one that last passed verification (it crashed after its window, "+
				"while its change still rolled to other workloads); configstamp keeps no earlier verified revision to return to", rollout.AnnotationOnFailure)
		return
	}
	prev, revision, err := r.verifiedRevision(ctx, obj, rec.Verified)
	if err != nil || prev == nil {
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonUndoImpossible, "Undo",
			"%s: undo is asked, but the last verified revision of this workload (stamp %s) is no longer kept (revisionHistoryLimit) (%v)",
			rollout.AnnotationOnFailure, rec.Verified, err)
		return
	}
	if edit := editedSince(tmpl, prev); edit != "" {
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonUndoImpossible, "Undo",
			"%s: undo is asked, but the pod template differs from revision %d in more than configstamp's stamp and snapshots (%s): "+
				"configstamp never overwrites an edit; the change stays halted (fix it, or undo by hand)", rollout.AnnotationOnFailure, revision, edit)
		return
	}
	thawed, err := r.restoreTemplate(ctx, obj, tmpl.DeepCopy(), prev, freeze)
	if errors.Is(err, errEditedMeanwhile) {
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonUndoImpossible, "Undo",
			"%s: undo is asked, but %v; the change stays halted", rollout.AnnotationOnFailure, err)
		return
	}
	if now := r.Kind.PodTemplate(obj).Annotations[stamp.AnnotationHash]; err == nil && now != prev.Annotations[stamp.AnnotationHash] {
		// The webhook kept the template: the revision's snapshots no longer
		// hold what its stamp says (its PinFailed event says why).
		err = fmt.Errorf("the webhook kept the template stamped %s", now)
	}
	if err != nil {
		log.FromContext(ctx).Error(err, "undo of the failed rollout")
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonUndoImpossible, "Undo", "the undo to revision %d failed: %v", revision, err)
		return
	}
	log.FromContext(ctx).Info("failed rollout undone", "revision", revision, "stamp", prev.Annotations[stamp.AnnotationHash])
	rollout.UndosTotal.WithLabelValues("undone", r.Kind.Name).Inc()
	r.followUndo(ctx, obj, rec, prev.Annotations[stamp.AnnotationHash])
	resumed := ""
	if thawed {
		resumed = " (its rollout, paused at the failed canary, is resumed for it)"
	}
	r.Recorder.Eventf(obj, nil, corev1.EventTypeNormal, ReasonRolloutUndone, "Undo",
		"the rollout failed: the workload is returned to its revision %d (stamp %s), whose snapshots hold the config it ran before%s; "+
			"the change stays halted until it is fixed", revision, prev.Annotations[stamp.AnnotationHash], resumed)
	if s, ok := obj.(*appsv1.StatefulSet); ok && s.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		// kubernetes/kubernetes#67250: with OrderedReady the controller waits
		// for the broken pod to become Ready before it replaces it, forever.
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonUndoNeedsPodDelete, "Undo",
			"the StatefulSet is returned to revision %d, but with podManagementPolicy OrderedReady its controller does not replace a pod of the failed "+
				"revision that never becomes Ready (kubernetes/kubernetes#67250): delete that pod (kubectl delete pod) for the undo to reach it; "+
				"configstamp never deletes pods", revision)
	}
}

// followUndo writes the record of the undo's own rollout to the revision
// stamped to, after the failure rec: followed, verified and closed back
// into that failure like any rollout (Record.StartUndo). Not written (an
// error): the undo stands, unfollowed, and the log says so.
func (r *kindReconciler) followUndo(ctx context.Context, obj client.Object, rec rollout.Record, to string) {
	meta := r.sealed(obj, rec.StartUndo(time.Now(), to))
	err := patchAnnotations(ctx, r.Client, obj, "", meta, nil)
	if _, err = r.landed(ctx, obj, meta, err); err != nil {
		log.FromContext(ctx).Error(err, "the undo's rollout is not followed: its record could not be written")
	}
}

// reportUndo tells how the undo's own rollout, closed by d, ended: verified
// (its revision runs healthy again), or failed too, which is not undone
// again: the change's halt stays either way.
func (r *kindReconciler) reportUndo(ctx context.Context, obj client.Object, d rollout.Decision) {
	to := d.Judged.Undo
	if d.Failure == "" {
		rollout.UndosTotal.WithLabelValues("verified", r.Kind.Name).Inc()
		log.FromContext(ctx).Info("the undo's rollout passed verification", "stamp", to, "elapsed", time.Since(d.Judged.Started).Round(time.Second).String())
		r.Recorder.Eventf(obj, nil, corev1.EventTypeNormal, ReasonUndoVerified, "Undo",
			"the undo's rollout to the revision stamped %s completed and stayed healthy: the workload runs the config it ran before %s; "+
				"that change stays halted until it is fixed", to, d.Judged.Cause)
		return
	}
	rollout.UndosTotal.WithLabelValues("failed", r.Kind.Name).Inc()
	log.FromContext(ctx).Info("the undo's rollout failed", "stamp", to, "reason", d.Failure)
	r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonUndoFailed, "Undo",
		"the undo's rollout to the revision stamped %s failed too: %s; configstamp does not undo it again: the workload needs a look "+
			"(the change %s stays halted)", to, d.Failure, d.Judged.Cause)
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

// wantsUndo reads rollout.OnFailure from the workload and its Namespace;
// a bad value is a Warning event.
func (r *kindReconciler) wantsUndo(ctx context.Context, obj client.Object) bool {
	ns := &corev1.Namespace{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: obj.GetNamespace()}, ns); err != nil {
		return false
	}
	undo, problems := rollout.OnFailure(obj.GetAnnotations(), ns.Annotations, r.Scheduler.Policy.UndoOnFailure)
	for _, p := range problems {
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, workload.ReasonInvalidValue, "Ignore", "%s", p.String())
	}
	return undo
}

// verifiedRevision is the newest pinned revision of obj (from the cache,
// which holds the pinned ReplicaSets and ControllerRevisions) whose template
// is stamped verified: the last one that passed verification. Its kind says
// where its revisions are and how they are numbered.
func (r *kindReconciler) verifiedRevision(ctx context.Context, obj client.Object, verified string) (*corev1.PodTemplateSpec, int64, error) {
	list := r.Kind.Revisions()
	if list == nil {
		return nil, 0, nil
	}
	if err := r.Client.List(ctx, list, client.InNamespace(obj.GetNamespace()), client.MatchingLabels{pin.LabelPinned: "true"}); err != nil {
		return nil, 0, err
	}
	var best *corev1.PodTemplateSpec
	var bestRev int64
	err := meta.EachListItem(list, func(item runtime.Object) error {
		rev, ok := item.(client.Object)
		if !ok {
			return nil
		}
		n := r.Kind.RevisionNumber(rev)
		if !metav1.IsControlledBy(rev, obj) || n <= bestRev {
			return nil
		}
		t, err := revisionTemplate(rev)
		if err != nil || t.Annotations[stamp.AnnotationHash] != verified {
			return err
		}
		best, bestRev = t.DeepCopy(), n
		if _, ok := rev.(*appsv1.ReplicaSet); ok {
			delete(best.Labels, appsv1.DefaultDeploymentUniqueLabelKey) // the Deployment controller adds its own
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return best, bestRev, nil
}

// errEditedMeanwhile: the template changed since the failure was judged.
var errEditedMeanwhile = errors.New("the pod template was changed since the failure was judged (a fix or an edit): configstamp does not overwrite it")

// restoreTemplate replaces obj's pod template by t, only while the template
// is still exactly the failed one judged: it reads the workload live,
// compares its template with failed, and patches that version only (its
// resourceVersion), again on a conflict (a status update in between). A
// fix or a user's edit since wins (errEditedMeanwhile). No JSON "test" of
// the template: API servers before 1.33 write fields this client omits
// (creationTimestamp: null), which no test would match. The fields of
// freeze the workload still has at their frozen value are put back in the
// same write (thawed).
func (r *kindReconciler) restoreTemplate(ctx context.Context, obj client.Object, failed, t *corev1.PodTemplateSpec, freeze workload.Hold) (thawed bool, err error) {
	var reader client.Reader = r.Client
	if r.APIReader != nil {
		reader = r.APIReader
	}
	for attempt := 0; ; attempt++ {
		live := r.Kind.New()
		if err := reader.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
			return false, fmt.Errorf("while reading %s/%s before the undo: %w", obj.GetNamespace(), obj.GetName(), err)
		}
		if !equality.Semantic.DeepEqual(r.Kind.PodTemplate(live), failed) {
			return false, errEditedMeanwhile
		}
		thaw := freeze.ThawOps(live)
		raw, err := json.Marshal(append([]map[string]any{
			{"op": "replace", "path": "/metadata/resourceVersion", "value": live.GetResourceVersion()},
			{"op": "replace", "path": "/spec/template", "value": t},
			// The webhook takes configstamp's own UPDATE for a rollback only with it.
			{"op": "add", "path": "/metadata/annotations/" + strings.ReplaceAll(pin.AnnotationUndoTo, "/", "~1"), "value": t.Annotations[stamp.AnnotationHash]},
		}, thaw...))
		if err != nil {
			return false, err
		}
		err = r.Client.Patch(ctx, obj, client.RawPatch(types.JSONPatchType, raw), client.FieldOwner(FieldManager))
		if apierrors.IsConflict(err) && attempt < 3 {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("while restoring the verified template of %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
		}
		return len(thaw) > 0, nil
	}
}
