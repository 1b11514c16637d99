package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/controllers/pin"
)

// RevisionOwner hands the snapshots of pinned workloads over to their
// revisions: each new ReplicaSet or ControllerRevision whose template is
// pinned becomes an owner of the snapshots it names, in place of its
// workload. Kubernetes' garbage collector then deletes a snapshot when the
// last revision using it is pruned (revisionHistoryLimit) or deleted, so an
// undo to any revision still kept finds its snapshots, and the number of
// snapshots follows the number of revisions.
type RevisionOwner struct {
	// Cache holds the pinned revisions (CacheOptions, pinned).
	Cache client.Reader
	// Snapshots reads the snapshots live and writes their owners (fenced).
	Snapshots *pin.Snapshots
	// New returns an empty revision object: a ReplicaSet or a ControllerRevision.
	New func() client.Object
}

// Reconcile hands the snapshots of one revision over to it.
func (r *RevisionOwner) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	rev := r.New()
	if err := r.Cache.Get(ctx, req.NamespacedName, rev); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	tmpl, err := revisionTemplate(rev)
	if err != nil || !rev.GetDeletionTimestamp().IsZero() {
		return reconcile.Result{}, err
	}
	var replaces metav1.OwnerReference
	if c := metav1.GetControllerOf(rev); c != nil {
		replaces = *c
	}
	gvk := appsv1.SchemeGroupVersion.WithKind(kindName(rev))
	owner := metav1.OwnerReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: rev.GetName(), UID: rev.GetUID()}
	for ref, name := range pin.Pinned(tmpl) {
		if err := r.Snapshots.Adopt(ctx, ref.Kind, rev.GetNamespace(), name, owner, replaces.UID); err != nil && !apierrors.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("while handing the snapshot %s over to %s %s: %w", name, gvk.Kind, rev.GetName(), err)
		}
	}
	return reconcile.Result{}, nil
}

// revisionTemplate is the pod template a revision records.
func revisionTemplate(rev client.Object) (*corev1.PodTemplateSpec, error) {
	switch o := rev.(type) {
	case *appsv1.ReplicaSet:
		return &o.Spec.Template, nil
	case *appsv1.ControllerRevision:
		// A StatefulSet's or DaemonSet's revision: a patch holding spec.template.
		var data struct {
			Spec struct {
				Template corev1.PodTemplateSpec `json:"template"`
			} `json:"spec"`
		}
		if err := json.Unmarshal(o.Data.Raw, &data); err != nil {
			return nil, fmt.Errorf("while reading ControllerRevision %s/%s: %w", o.Namespace, o.Name, err)
		}
		return &data.Spec.Template, nil
	}
	return nil, fmt.Errorf("%T is no revision", rev)
}

func kindName(rev client.Object) string {
	if _, ok := rev.(*appsv1.ReplicaSet); ok {
		return "ReplicaSet"
	}
	return "ControllerRevision"
}

// SetupWithManager follows the pinned revisions as they are made: a revision's
// template never changes, so only its creation (and each one listed at start)
// matters.
func (r *RevisionOwner) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("pinned-"+strings.ToLower(kindName(r.New()))).
		For(r.New(), builder.WithPredicates(predicate.Funcs{
			CreateFunc:  func(event.CreateEvent) bool { return true },
			UpdateFunc:  func(event.UpdateEvent) bool { return false },
			DeleteFunc:  func(event.DeleteEvent) bool { return false },
			GenericFunc: func(event.GenericEvent) bool { return false },
		})).
		Complete(r)
}

// pinnedRevisions are the cache entries of the revisions RevisionOwner
// follows: only those whose template is pinned (pin.LabelPinned), so that
// configstamp caches no other ReplicaSet or ControllerRevision.
func pinnedRevisions(byObject map[client.Object]ctrlcache.ByObject) {
	only := labels.SelectorFromSet(labels.Set{pin.LabelPinned: "true"})
	byObject[&appsv1.ReplicaSet{}] = ctrlcache.ByObject{Label: only, Transform: stripMetadata}
	byObject[&appsv1.ControllerRevision{}] = ctrlcache.ByObject{Label: only, Transform: stripMetadata}
}
