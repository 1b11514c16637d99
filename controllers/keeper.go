package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// Events of the SnapshotKeeper.
const (
	// ReasonSnapshotRestored: a snapshot deleted while a workload's template
	// names it was made again from its source, which still holds its content.
	ReasonSnapshotRestored = "SnapshotRestored"
	// ReasonSnapshotLost: such a snapshot cannot be made again (its source
	// changed or is gone); configstamp_warnings_total{reason="SnapshotLost"}
	// counts these events.
	ReasonSnapshotLost = "SnapshotLost"
)

// IndexPinned indexes workloads by the snapshots their current template
// names ("ConfigMap/name", "Secret/name").
const IndexPinned = "configstamp.io/pinned-snapshots"

// indexPinned is IndexPinned's function for workloads of kind.
func indexPinned(kind workload.Kind) client.IndexerFunc {
	return func(obj client.Object) []string {
		tmpl := kind.PodTemplate(obj)
		if tmpl == nil {
			return nil
		}
		var out []string
		for ref, name := range pin.Pinned(tmpl) {
			out = append(out, string(ref.Kind)+"/"+name)
		}
		return out
	}
}

// SnapshotKeeper puts back a snapshot deleted (by hand, or by a tool that
// prunes ConfigMaps) while the current template of a pinned workload still
// names it: pods that start from that template would not start. When the
// source still holds the snapshot's content it makes the snapshot again,
// owned by the revisions that name it; otherwise it says so on each workload
// (a SnapshotLost Warning event, counted in configstamp_warnings_total) and
// tries again with the controller's backoff, so that a source reverted to
// that content brings the snapshot back. It never rolls a workload: that
// stays the wave's.
type SnapshotKeeper struct {
	// Kind is the snapshots' kind: ConfigMap or Secret.
	Kind stamp.Kind
	// Cache holds the workloads (IndexPinned) and the pinned revisions.
	Cache client.Reader
	// Reader reads snapshots and sources live (the cache holds no snapshot,
	// and digests instead of data).
	Reader client.Reader
	// Snapshots makes snapshots (fenced writer).
	Snapshots *pin.Snapshots
	Keys      *stamp.Keyring
	Recorder  events.EventRecorder
	// Scope: workloads in namespaces out of it are not ours. Nil: every namespace.
	Scope *workload.Scope
	// Kinds are the kinds of workloads that may name a snapshot.
	Kinds *workload.Registry

	// retry spaces the attempts for a snapshot that cannot be made again.
	retry workqueue.TypedRateLimiter[reconcile.Request]
}

// newKeeperRetry is the SnapshotKeeper's backoff per snapshot.
func newKeeperRetry() workqueue.TypedRateLimiter[reconcile.Request] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[reconcile.Request](keeperRetryFirst, keeperRetryMax)
}

// Backoff of the SnapshotKeeper's attempts for one snapshot.
const (
	keeperRetryFirst = 5 * time.Second
	keeperRetryMax   = 5 * time.Minute
)

// user is a workload whose current template names the snapshot.
type user struct {
	obj  client.Object
	kind workload.Kind
	src  stamp.ObjectRef
}

// Reconcile looks at one deleted snapshot: who still names it, whether it is
// back, whether its source still holds its content; and makes it again, or
// says it cannot and asks again later (backoff).
func (k *SnapshotKeeper) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	users, err := k.users(ctx, req)
	if len(users) == 0 || err != nil {
		k.retry.Forget(req)
		return reconcile.Result{}, err
	}
	err = k.present(ctx, req)
	if errors.Is(err, errBack) {
		k.retry.Forget(req)
		return reconcile.Result{}, nil
	}
	if err == nil {
		err = k.restore(ctx, req, users)
	}
	if errors.Is(err, errLost) || errors.Is(err, pin.ErrTaken) {
		if k.retry.NumRequeues(req) == 0 {
			k.lost(users, req.Name, err) // once per loss: the retries are logged
		}
		after := k.retry.When(req)
		log.FromContext(ctx).Info("snapshot deleted and not made again; asking again later", "why", err.Error(), "after", after.String())
		return reconcile.Result{RequeueAfter: after}, nil
	}
	if err == nil {
		k.retry.Forget(req)
	}
	return reconcile.Result{}, err // an API error: the controller's own backoff
}

// users lists the workloads in scope whose current template names the
// snapshot req.
func (k *SnapshotKeeper) users(ctx context.Context, req reconcile.Request) ([]user, error) {
	ns := &corev1.Namespace{}
	if err := k.Cache.Get(ctx, client.ObjectKey{Name: req.Namespace}, ns); err != nil || !k.Scope.InScope(ns.Name, ns.Labels) {
		return nil, client.IgnoreNotFound(err)
	}
	var out []user
	for _, kind := range k.Kinds.All() {
		list := kind.NewList()
		if err := k.Cache.List(ctx, list, client.InNamespace(req.Namespace), client.MatchingFields{IndexPinned: string(k.Kind) + "/" + req.Name}); err != nil {
			return nil, fmt.Errorf("while listing the %s that name the snapshot %s: %w", kind.Resource, req.Name, err)
		}
		for _, obj := range kind.Items(list) {
			for ref, name := range pin.Pinned(kind.PodTemplate(obj)) {
				if ref.Kind == k.Kind && name == req.Name && obj.GetDeletionTimestamp().IsZero() {
					out = append(out, user{obj: obj, kind: kind, src: ref})
				}
			}
		}
	}
	return out, nil
}

// errBack is present's answer when configstamp's snapshot exists again (made
// by an admission since, or the deletion event was old).
var errBack = errors.New("the snapshot exists again")

// errLost wraps the reasons a snapshot cannot be made again: its source
// changed or is gone.
var errLost = errors.New("cannot be made again")

// present returns errBack when configstamp's snapshot req exists again,
// pin.ErrTaken when another object holds its name, nil when it is missing.
func (k *SnapshotKeeper) present(ctx context.Context, req reconcile.Request) error {
	have := pin.NewSource(k.Kind)
	err := k.Reader.Get(ctx, req.NamespacedName, have)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	case have.GetLabels()[pin.LabelSnapshot] != "true" || have.GetLabels()[pin.LabelManagedBy] != pin.Manager:
		return fmt.Errorf("%s %s: %w", k.Kind, req.NamespacedName, pin.ErrTaken)
	}
	return errBack
}

// source reads the snapshot's source live and returns it when it still holds
// the content the name says (under the current key or one it replaced);
// errLost when it does not.
func (k *SnapshotKeeper) source(ctx context.Context, req reconcile.Request, ref stamp.ObjectRef) (client.Object, error) {
	src := pin.NewSource(k.Kind)
	if err := k.Reader.Get(ctx, client.ObjectKey{Namespace: req.Namespace, Name: ref.Name}, src); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%w: its source %s is gone", errLost, ref)
		}
		return nil, err
	}
	for _, h := range k.Keys.Hashers() {
		if pin.Names(h, src, req.Name) {
			return src, nil
		}
	}
	return nil, fmt.Errorf("%w: its source %s no longer holds its content", errLost, ref)
}

// restore makes the snapshot req again from its source, in one create, owned
// by the pinned revisions of its users that name it (so that it goes with
// them), or by the users themselves when they have none (a revision not made
// yet, a kind without revisions).
func (k *SnapshotKeeper) restore(ctx context.Context, req reconcile.Request, users []user) error {
	src, err := k.source(ctx, req, users[0].src)
	if err != nil {
		return err
	}
	owners, err := k.owners(ctx, req.Namespace, req.Name, users)
	if err != nil {
		return err
	}
	if err := k.Snapshots.Ensure(ctx, pin.Snapshot(src, req.Name), owners...); err != nil {
		return err
	}
	for _, u := range users {
		k.Recorder.Eventf(u.obj, nil, corev1.EventTypeNormal, ReasonSnapshotRestored, "Pin",
			"the snapshot %s %s of %s, which this workload's template names, was deleted; configstamp made it again from %s, which still holds its content",
			k.Kind, req.Name, u.src, u.src)
	}
	return nil
}

// owners are the owner references a restored snapshot gets.
func (k *SnapshotKeeper) owners(ctx context.Context, namespace, name string, users []user) ([]metav1.OwnerReference, error) {
	uids := map[string]bool{}
	for _, u := range users {
		uids[string(u.obj.GetUID())] = true
	}
	var out []metav1.OwnerReference
	pinned := client.MatchingLabels{pin.LabelPinned: "true"}
	for _, list := range []client.ObjectList{&appsv1.ReplicaSetList{}, &appsv1.ControllerRevisionList{}} {
		if err := k.Cache.List(ctx, list, client.InNamespace(namespace), pinned); err != nil {
			return nil, fmt.Errorf("while listing the pinned revisions in %s: %w", namespace, err)
		}
		for _, rev := range revisions(list) {
			c := metav1.GetControllerOf(rev)
			tmpl, err := revisionTemplate(rev)
			if c == nil || !uids[string(c.UID)] || err != nil || !rev.GetDeletionTimestamp().IsZero() || !names(pin.Pinned(tmpl), k.Kind, name) {
				continue
			}
			gv := appsv1.SchemeGroupVersion.String()
			out = append(out, metav1.OwnerReference{APIVersion: gv, Kind: kindName(rev), Name: rev.GetName(), UID: rev.GetUID()})
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	for _, u := range users {
		gvk := u.kind.GVK
		if gvk.Empty() {
			gvk = appsv1.SchemeGroupVersion.WithKind(u.kind.Name)
		}
		out = append(out, metav1.OwnerReference{APIVersion: gvk.GroupVersion().String(), Kind: gvk.Kind, Name: u.obj.GetName(), UID: u.obj.GetUID()})
	}
	return out, nil
}

func revisions(list client.ObjectList) []client.Object {
	var out []client.Object
	switch l := list.(type) {
	case *appsv1.ReplicaSetList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	case *appsv1.ControllerRevisionList:
		for i := range l.Items {
			out = append(out, &l.Items[i])
		}
	}
	return out
}

// names reports whether pins name the snapshot name of kind.
func names(pins pin.Pins, kind stamp.Kind, name string) bool {
	for ref, n := range pins {
		if ref.Kind == kind && n == name {
			return true
		}
	}
	return false
}

// lost tells each user that its snapshot is gone and cannot be made again,
// and what to do.
func (k *SnapshotKeeper) lost(users []user, name string, why error) {
	for _, u := range users {
		k.Recorder.Eventf(u.obj, nil, corev1.EventTypeWarning, ReasonSnapshotLost, "Pin",
			"the snapshot %s %s of %s, which this workload's template names, was deleted: %v. "+
				"Pods that start from this template cannot read it. Put %s's earlier content back (configstamp then makes the snapshot again), "+
				"or move the workload to %s's current content: it moves with its rollout, or now with kubectl rollout restart "+
				"(a halted change first needs kubectl configstamp resume)", k.Kind, name, u.src, why, u.src, u.src)
	}
}

// SetupWithManager follows the deletions of snapshots of k.Kind through
// snapshots, a cache of their metadata only (the manager's cache holds none).
func (k *SnapshotKeeper) SetupWithManager(mgr ctrl.Manager, snapshots ctrlcache.Cache) error {
	obj := SnapshotMetadata(k.Kind)
	deleted := predicate.Funcs{
		CreateFunc:  func(event.CreateEvent) bool { return false },
		UpdateFunc:  func(event.UpdateEvent) bool { return false },
		DeleteFunc:  func(event.DeleteEvent) bool { return true },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	k.retry = newKeeperRetry()
	return ctrl.NewControllerManagedBy(mgr).
		Named("snapshot-keeper-" + strings.ToLower(string(k.Kind))).
		WatchesRawSource(source.Kind(snapshots, client.Object(obj), &handler.EnqueueRequestForObject{}, deleted)).
		Complete(k)
}

// SnapshotCache returns a cache of the metadata of configstamp's snapshots
// in scope, for the SnapshotKeeper; add it to the manager.
func SnapshotCache(mgr ctrl.Manager, scope *workload.Scope) (ctrlcache.Cache, error) {
	opts := SnapshotCacheOptions(scope)
	opts.Scheme, opts.Mapper, opts.HTTPClient = mgr.GetScheme(), mgr.GetRESTMapper(), mgr.GetHTTPClient()
	return ctrlcache.New(mgr.GetConfig(), opts)
}

// SnapshotCacheOptions are the settings of SnapshotCache: configstamp's
// snapshots only, in scope, without managedFields. It is watched for
// metadata only (SnapshotMetadata), so no snapshot's data is ever held.
func SnapshotCacheOptions(scope *workload.Scope) ctrlcache.Options {
	return ctrlcache.Options{
		DefaultNamespaces:    ScopeNamespaces(scope),
		DefaultLabelSelector: labels.SelectorFromSet(labels.Set{pin.LabelSnapshot: "true", pin.LabelManagedBy: pin.Manager}),
		DefaultTransform:     stripMetadata,
	}
}

// SnapshotMetadata is the object the SnapshotKeeper of kind watches in a
// SnapshotCache: the metadata of a ConfigMap or Secret.
func SnapshotMetadata(kind stamp.Kind) *metav1.PartialObjectMetadata {
	obj := &metav1.PartialObjectMetadata{}
	obj.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: string(kind)})
	return obj
}
