package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// Event reasons of the automatic undo (rollout's undo decides it).
const (
	ReasonRolloutUndone      = rollout.ReasonRolloutUndone
	ReasonUndoImpossible     = rollout.ReasonUndoImpossible
	ReasonUndoNeedsPodDelete = rollout.ReasonUndoNeedsPodDelete
	ReasonUndoVerified       = rollout.ReasonUndoVerified
	ReasonUndoFailed         = rollout.ReasonUndoFailed
)

// undoFacts is what the undo of obj's rollout needs, read only when a
// failure may be judged now (rollout.MayFail, its pods read as v): whether
// it asks for undo (rollout.OnFailure, from the workload and its
// Namespace; a bad value is told if it fails) and, when an undo could
// help, the revision it would return to (a cache read of its pinned
// revisions). A Namespace that cannot be read asks for nothing.
func (r *kindReconciler) undoFacts(ctx context.Context, obj client.Object, v rollout.Verification) rollout.UndoFacts {
	rec := rollout.Read(obj.GetAnnotations())
	ns := &corev1.Namespace{}
	if !rollout.MayFail(rec, v) || r.Client.Get(ctx, client.ObjectKey{Name: obj.GetNamespace()}, ns) != nil {
		return rollout.UndoFacts{}
	}
	f := rollout.UndoFacts{Pin: r.Pin}
	f.Wanted, f.Problems = rollout.OnFailure(obj.GetAnnotations(), ns.Annotations, r.Scheduler.Policy.UndoOnFailure)
	tmpl := r.Kind.PodTemplate(obj)
	switch {
	case rollout.UndoWanted(r.Kind, tmpl, f, rec):
		f.Revision, f.Number, f.Err = r.verifiedRevision(ctx, obj, rollout.ParseVerified(rec.Verified))
		f.Template, f.Current, f.Err = r.liveTemplate(ctx, obj, f.Err)
	case rollout.MayVerify(rec, v) && rollout.Undoable(r.Kind, tmpl, f):
		// Its record will name the revision it verifies whole: read when it
		// may close, not at every reconcile while it rolls.
		f.Template, f.Current, _ = r.liveTemplate(ctx, obj, nil)
	}
	return f
}

// liveTemplate is obj's pod template read live, whole (the cache keeps a
// slim copy), and its digest when it is the template of obj's generation
// (rollout.TemplateDigest; "" when an edit landed since), when err
// (reading its revisions) is nil; an error reading it is the undo's.
func (r *kindReconciler) liveTemplate(ctx context.Context, obj client.Object, err error) (*corev1.PodTemplateSpec, string, error) {
	if err != nil || r.APIReader == nil {
		return nil, "", err
	}
	live := r.Kind.New()
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(obj), live); err != nil {
		return nil, "", fmt.Errorf("while reading %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	tmpl := r.Kind.PodTemplate(live)
	if live.GetGeneration() != obj.GetGeneration() {
		return tmpl, "", nil
	}
	return tmpl, rollout.TemplateDigest(tmpl), nil
}

// verifiedRevision is the newest pinned revision of obj (from the cache,
// which holds the pinned ReplicaSets and ControllerRevisions) whose template
// is stamped verified: the last one that passed verification. Its kind says
// where its revisions are and how they are numbered.
func (r *kindReconciler) verifiedRevision(ctx context.Context, obj client.Object, verified rollout.VerifiedID) (*corev1.PodTemplateSpec, int64, error) {
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
		if err != nil || !verified.Names(t) {
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

// restoreTemplate replaces obj's pod template by t, only while the template
// is still exactly the failed one judged: it reads the workload live,
// compares its template with failed, and patches that version only (its
// resourceVersion), again on a conflict (a status update in between). A
// fix or a user's edit since wins (rollout.ErrEditedMeanwhile). No JSON "test" of
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
			return false, rollout.ErrEditedMeanwhile
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
