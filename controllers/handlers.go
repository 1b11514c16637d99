package controllers

import (
	"context"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

type queue = workqueue.TypedRateLimitingInterface[rollout.Key]

// mapper maps ConfigMap, Secret and Namespace events to the workloads of
// every kind that they concern. It only reads (the cache) and enqueues: it
// emits no events (bad selectors: SelectorWarner).
type mapper struct {
	client client.Reader
	kinds  *workload.Registry
	// scheduler learns of the workloads a source change concerns, with their
	// priorities, before they ask for a slot (rollout.Scheduler.Announce).
	scheduler *rollout.Scheduler
}

// workloadKey queues the key of a workload of kind for its own events.
func workloadKey(kind workload.Kind) handler.TypedEventHandler[client.Object, rollout.Key] {
	return handler.TypedEnqueueRequestsFromMapFunc(func(_ context.Context, obj client.Object) []rollout.Key {
		return []rollout.Key{{Kind: kind.Name, Namespace: obj.GetNamespace(), Name: obj.GetName()}}
	})
}

// sourceHandler enqueues, for a ConfigMap or Secret event, the workloads that
// reference the object (field index) and those whose template labels match its
// rollout selector, before or after the change.
func (m *mapper) sourceHandler(kind stamp.Kind) handler.TypedEventHandler[client.Object, rollout.Key] {
	return handler.TypedFuncs[client.Object, rollout.Key]{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q queue) {
			m.enqueue(ctx, kind, q, e.Object)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q queue) {
			m.enqueue(ctx, kind, q, e.ObjectOld, e.ObjectNew)
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q queue) {
			m.enqueue(ctx, kind, q, e.Object)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q queue) {
			m.enqueue(ctx, kind, q, e.Object)
		},
	}
}

// enqueue announces to the scheduler every workload, of any kind, that objs
// concern, then queues them all: the first to ask for a slot already sees
// the others' priorities, whatever their kind.
func (m *mapper) enqueue(ctx context.Context, kind stamp.Kind, q queue, objs ...client.Object) {
	var refs []stamp.ObjectRef // the source whose change it is
	if len(objs) > 0 {
		refs = []stamp.ObjectRef{{Kind: kind, Name: objs[0].GetName()}}
	}
	var keys []rollout.Key
	for _, k := range m.kinds.All() {
		for _, w := range m.concerned(ctx, k, kind, objs) {
			key := rollout.Key{Kind: k.Name, Namespace: w.GetNamespace(), Name: w.GetName()}
			if m.scheduler != nil {
				priority, _ := rollout.Priority(w.GetAnnotations())
				m.scheduler.Announce(key, priority, refs...)
			}
			keys = append(keys, key)
		}
	}
	for _, key := range keys {
		q.Add(key)
	}
}

// concerned returns the workloads of kind k that reference a source of
// kind in objs (field index), or whose template labels match its rollout
// selector, each once.
func (m *mapper) concerned(ctx context.Context, k workload.Kind, kind stamp.Kind, objs []client.Object) []client.Object {
	seen := map[types.NamespacedName]bool{}
	var out []client.Object
	add := func(o client.Object) {
		key := types.NamespacedName{Namespace: o.GetNamespace(), Name: o.GetName()}
		if !seen[key] {
			seen[key] = true
			out = append(out, o)
		}
	}
	logger := log.FromContext(ctx)
	for i, obj := range objs {
		ns := obj.GetNamespace()
		ref := stamp.ObjectRef{Kind: kind, Name: obj.GetName()}
		if i == 0 { // the index answer is the same for old and new
			list := k.NewList()
			if err := m.client.List(ctx, list, client.InNamespace(ns), client.MatchingFields{IndexSources: ref.String()}, client.UnsafeDisableDeepCopy); err != nil {
				logger.Error(err, "while listing workloads by index", "source", ref, "namespace", ns, "kind", k.Name)
			}
			for _, w := range k.Items(list) {
				add(w)
			}
		}
		sel, ok, _ := stamp.RolloutSelector(obj.GetAnnotations())
		if !ok || sel.Empty() {
			continue
		}
		list := k.NewList()
		if err := m.client.List(ctx, list, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
			logger.Error(err, "while listing workloads for a selector", "source", ref, "namespace", ns, "kind", k.Name)
			continue
		}
		for _, w := range k.Items(list) {
			if tmpl := k.PodTemplate(w); tmpl != nil && sel.Matches(labels.Set(tmpl.Labels)) {
				add(w)
			}
		}
	}
	return out
}

func selectorValue(obj client.Object) string {
	a := obj.GetAnnotations()
	return a[stamp.AnnotationRolloutSelector] + "\x00" + a[stamp.AnnotationPodDeleteMatch]
}

// sourceReference refers to a ConfigMap or Secret for an event. The cache keeps no
// UIDs (48 bytes an object), but `kubectl describe` shows only events whose
// involvedObject.uid is the object's, so it reads the UID live (metadata only).
// Events about sources are rare: a failed rollout, a malformed annotation.
func sourceReference(ctx context.Context, live client.Reader, namespace string, ref stamp.ObjectRef) *corev1.ObjectReference {
	out := &corev1.ObjectReference{APIVersion: "v1", Kind: string(ref.Kind), Namespace: namespace, Name: ref.Name}
	if live == nil {
		return out
	}
	meta := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: string(ref.Kind)}}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := live.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, meta); err == nil {
		out.UID, out.ResourceVersion = meta.UID, meta.ResourceVersion
	} else {
		log.FromContext(ctx).V(1).Info("event without the object's UID", "object", ref.String(), "error", err.Error())
	}
	return out
}

// liveVersion reads the resourceVersion of a source live (metadata only), or
// stamp.VersionAbsent.
func liveVersion(ctx context.Context, live client.Reader, namespace string, ref stamp.ObjectRef) (string, error) {
	meta := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: string(ref.Kind)}}
	if err := live.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ref.Name}, meta); err != nil {
		if apierrors.IsNotFound(err) {
			return stamp.VersionAbsent, nil
		}
		return "", fmt.Errorf("while reading %s %s/%s: %w", ref.Kind, namespace, ref.Name, err)
	}
	return meta.ResourceVersion, nil
}

// haltLifted wakes the workloads waiting on a halted change when the workload
// that halted it no longer does: deleted, recovered, or its halted annotation
// removed by a user (the documented way to resume a wave). A workload
// outside this installation's scope (inScope of its namespace) halts
// nothing of it: another installation's, passed over.
func haltLifted(s *rollout.Scheduler, inScope func(ctx context.Context, namespace string) bool) handler.TypedEventHandler[client.Object, rollout.Key] {
	lifted := func(ctx context.Context, q queue, before, after client.Object) {
		was := rollout.ParseChanges(before.GetAnnotations()[rollout.AnnotationHalted])
		if len(was) == 0 || !inScope(ctx, before.GetNamespace()) {
			return
		}
		var still []rollout.Change
		if after != nil {
			still = rollout.ParseChanges(after.GetAnnotations()[rollout.AnnotationHalted])
		}
		var gone []string
		for _, c := range was {
			if !slices.Contains(still, c) {
				gone = append(gone, c.String())
			}
		}
		if len(gone) == 0 {
			return
		}
		rollout.Resumed.Inc()
		waiters := s.Lifted(gone)
		log.FromContext(ctx).Info("halt lifted; waking the workloads that waited", "workload", before.GetNamespace()+"/"+before.GetName(),
			"changes", gone, "waiting", len(waiters))
		for _, k := range waiters {
			q.Add(k)
		}
	}
	return handler.TypedFuncs[client.Object, rollout.Key]{
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q queue) { lifted(ctx, q, e.ObjectOld, e.ObjectNew) },
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q queue) { lifted(ctx, q, e.Object, nil) },
	}
}

// namespaceWorkloads enqueues every workload, of every kind, of a namespace
// whose labels changed (namespace opt-in).
func (m *mapper) namespaceWorkloads(ctx context.Context, obj client.Object) []rollout.Key {
	var keys []rollout.Key
	for _, k := range m.kinds.All() {
		list := k.NewList()
		if err := m.client.List(ctx, list, client.InNamespace(obj.GetName()), client.UnsafeDisableDeepCopy); err != nil {
			log.FromContext(ctx).Error(err, "while listing workloads of a namespace", "namespace", obj.GetName(), "kind", k.Name)
			continue
		}
		for _, w := range k.Items(list) {
			keys = append(keys, rollout.Key{Kind: k.Name, Namespace: w.GetNamespace(), Name: w.GetName()})
		}
	}
	return keys
}
