package pin

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// Snapshot returns the snapshot of src named name: an immutable object of the
// same kind (a Secret keeps its type) in the same namespace, with all of
// src's data, labelled as configstamp's and naming its source.
func Snapshot(src client.Object, name string) client.Object {
	meta := metav1.ObjectMeta{
		Name: name, Namespace: src.GetNamespace(),
		Labels:      map[string]string{LabelSnapshot: "true", LabelManagedBy: Manager},
		Annotations: map[string]string{SnapshotOf: src.GetName()},
	}
	if len(validation.IsValidLabelValue(src.GetName())) == 0 {
		meta.Labels[SnapshotOf] = src.GetName()
	}
	immutable := true
	switch o := src.(type) {
	case *corev1.ConfigMap:
		return &corev1.ConfigMap{ObjectMeta: meta, Immutable: &immutable,
			Data: maps.Clone(o.Data), BinaryData: maps.Clone(o.BinaryData)}
	case *corev1.Secret:
		return &corev1.Secret{ObjectMeta: meta, Immutable: &immutable, Type: o.Type, Data: maps.Clone(o.Data)}
	}
	return nil
}

// Same reports whether have is configstamp's snapshot of the source want
// copies (Snapshot(src, ...)): the same labels that make it configstamp's,
// the same source, immutable, the same data. Anything else under that name is
// someone else's and never used or overwritten.
func Same(have, want client.Object) bool {
	if have.GetLabels()[LabelSnapshot] != "true" || have.GetLabels()[LabelManagedBy] != Manager ||
		have.GetAnnotations()[SnapshotOf] != want.GetAnnotations()[SnapshotOf] {
		return false
	}
	switch h := have.(type) {
	case *corev1.ConfigMap:
		w := want.(*corev1.ConfigMap)
		return h.Immutable != nil && *h.Immutable && equality.Semantic.DeepEqual(h.Data, w.Data) &&
			equality.Semantic.DeepEqual(h.BinaryData, w.BinaryData)
	case *corev1.Secret:
		w := want.(*corev1.Secret)
		return h.Immutable != nil && *h.Immutable && h.Type == w.Type && equality.Semantic.DeepEqual(h.Data, w.Data)
	}
	return false
}

// ErrTaken is Ensure's error for a name held by an object that is not
// configstamp's snapshot of that content.
var ErrTaken = errors.New("the name is taken by an object that is not configstamp's snapshot of this content")

// Snapshots creates snapshots. Reader must read the API server (not a cache:
// a cached ConfigMap holds digests, not data).
type Snapshots struct {
	Reader client.Reader
	Writer client.Writer
}

// Ensure makes sure that the snapshot want (Snapshot) exists: it finds
// configstamp's identical snapshot under that name (made for another workload,
// or earlier), or creates it. It reads before it creates, so that an existing
// snapshot is used even when a ResourceQuota would refuse a new object.
// owners, when given, own a snapshot Ensure creates, or one that has no owner
// yet (made at a CREATE, before the workload had a UID); Kubernetes' garbage
// collector deletes a snapshot with its last owner. Revisions take over from
// workloads (Adopt).
func (s *Snapshots) Ensure(ctx context.Context, want client.Object, owners ...metav1.OwnerReference) error {
	have := want.DeepCopyObject().(client.Object)
	err := s.Reader.Get(ctx, client.ObjectKeyFromObject(want), have)
	if apierrors.IsNotFound(err) {
		want.SetOwnerReferences(owners)
		if err = s.Writer.Create(ctx, want); !apierrors.IsAlreadyExists(err) {
			return err
		}
		err = s.Reader.Get(ctx, client.ObjectKeyFromObject(want), have) // made a moment ago by another admission
	}
	if err != nil {
		return err
	}
	if !Same(have, want) {
		return fmt.Errorf("%s %s/%s: %w", kindOf(want), want.GetNamespace(), want.GetName(), ErrTaken)
	}
	if len(owners) == 0 || len(have.GetOwnerReferences()) > 0 {
		return nil
	}
	return s.setOwners(ctx, have, owners)
}

// Own makes owner the owner of configstamp's snapshot name of kind in
// namespace if it has none: a snapshot made at a workload's CREATE, when the
// workload had no UID, that its template leaves before a revision owned it. A
// missing object, or one that is not configstamp's snapshot, is left alone.
func (s *Snapshots) Own(ctx context.Context, kind stamp.Kind, namespace, name string, owner *metav1.OwnerReference) error {
	have, err := s.snapshot(ctx, kind, namespace, name)
	if have == nil || err != nil || len(have.GetOwnerReferences()) > 0 {
		return err
	}
	return s.setOwners(ctx, have, []metav1.OwnerReference{*owner})
}

// Adopt makes the revision owner (a ReplicaSet, a ControllerRevision) an
// owner of configstamp's snapshot name of kind in namespace, in place of its
// workload (whose UID is replaces): the snapshot then goes when the last
// revision using it is pruned (revisionHistoryLimit) or deleted with its
// workload. A missing object, or one that is not configstamp's snapshot, is
// left alone.
func (s *Snapshots) Adopt(ctx context.Context, kind stamp.Kind, namespace, name string, owner metav1.OwnerReference, replaces types.UID) error {
	have, err := s.snapshot(ctx, kind, namespace, name)
	if have == nil || err != nil {
		return err
	}
	owners := slices.DeleteFunc(slices.Clone(have.GetOwnerReferences()), func(o metav1.OwnerReference) bool { return o.UID == replaces })
	if !owned(have, &owner) {
		owners = append(owners, owner)
	}
	if len(owners) == len(have.GetOwnerReferences()) && owned(have, &owner) {
		return nil
	}
	return s.setOwners(ctx, have, owners)
}

// snapshot reads configstamp's snapshot name of kind in namespace: nil when it
// is missing or is not configstamp's.
func (s *Snapshots) snapshot(ctx context.Context, kind stamp.Kind, namespace, name string) (client.Object, error) {
	have := NewSource(kind)
	err := s.Reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, have)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil || have.GetLabels()[LabelSnapshot] != "true" || have.GetLabels()[LabelManagedBy] != Manager {
		return nil, err
	}
	return have, nil
}

// setOwners patches have's owners only; the resourceVersion makes it a
// compare-and-swap.
func (s *Snapshots) setOwners(ctx context.Context, have client.Object, owners []metav1.OwnerReference) error {
	patch := client.MergeFromWithOptions(have.DeepCopyObject().(client.Object), client.MergeFromWithOptimisticLock{})
	have.SetOwnerReferences(owners)
	return s.Writer.Patch(ctx, have, patch)
}

func owned(obj client.Object, owner *metav1.OwnerReference) bool {
	for _, o := range obj.GetOwnerReferences() {
		if o.UID == owner.UID {
			return true
		}
	}
	return false
}

// SourceKind is obj's kind if it is a ConfigMap or a Secret.
func SourceKind(obj client.Object) (stamp.Kind, bool) {
	switch obj.(type) {
	case *corev1.ConfigMap:
		return stamp.KindConfigMap, true
	case *corev1.Secret:
		return stamp.KindSecret, true
	}
	return "", false
}

// NewSource returns an empty ConfigMap or Secret for kind, or nil.
func NewSource(kind stamp.Kind) client.Object {
	switch kind {
	case stamp.KindConfigMap:
		return &corev1.ConfigMap{}
	case stamp.KindSecret:
		return &corev1.Secret{}
	}
	return nil
}

func kindOf(obj client.Object) stamp.Kind {
	kind, _ := SourceKind(obj)
	return kind
}

// Memo is a client.Reader that keeps a copy of every ConfigMap and Secret it
// reads, so that a snapshot copies exactly the data a stamp was computed on.
type Memo struct {
	client.Reader
	mu   sync.Mutex
	objs map[stamp.ObjectRef]client.Object
}

// NewMemo returns a Memo reading through r.
func NewMemo(r client.Reader) *Memo {
	return &Memo{Reader: r, objs: map[stamp.ObjectRef]client.Object{}}
}

// Get reads through and keeps what it read.
func (m *Memo) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if err := m.Reader.Get(ctx, key, obj, opts...); err != nil {
		return err
	}
	kind, ok := SourceKind(obj)
	if !ok {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objs[stamp.ObjectRef{Kind: kind, Name: key.Name}] = obj.DeepCopyObject().(client.Object)
	return nil
}

// Object returns what was read of ref, or nil.
func (m *Memo) Object(ref stamp.ObjectRef) client.Object {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.objs[ref]
}

// Redirect is a client.Reader that reads, for a source Pins names, its
// snapshot instead, under the source's name: a hash computed through it is
// the hash of what the pinned template's pods read. A snapshot that is
// missing, or not configstamp's, reads as missing.
type Redirect struct {
	client.Reader
	Pins Pins
}

// Get reads key, or the snapshot pinned for it.
func (r Redirect) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	kind, _ := SourceKind(obj)
	snap, ok := r.Pins[stamp.ObjectRef{Kind: kind, Name: key.Name}]
	if !ok {
		return r.Reader.Get(ctx, key, obj, opts...)
	}
	if err := r.Reader.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: snap}, obj, opts...); err != nil {
		return err
	}
	if obj.GetLabels()[LabelSnapshot] != "true" || obj.GetLabels()[LabelManagedBy] != Manager || obj.GetAnnotations()[SnapshotOf] != key.Name {
		return apierrors.NewNotFound(corev1.Resource(strings.ToLower(string(kind))+"s"), snap)
	}
	obj.SetName(key.Name)
	return nil
}
