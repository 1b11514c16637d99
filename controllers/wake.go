package controllers

import (
	"context"
	"fmt"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/workload"
)

// Wakes queues reconciles of workloads, of any kind, from outside their own
// events: the next in line when a slot frees, every workload when the
// installation key changes. Each wake is one Add of its key on the workload
// controller's one queue (source). A nil Wakes wakes nothing.
type Wakes chan event.TypedGenericEvent[rollout.Key]

// NewWakes returns the Wakes of the workload controller.
func NewWakes() Wakes { return make(Wakes, 1024) }

// Wake queues the reconciles of keys. It never blocks the caller (a
// reconcile, the key's watcher): past the buffer, the rest is sent from a
// goroutine of its own.
func (w Wakes) Wake(keys ...rollout.Key) {
	if w == nil {
		return
	}
	for i, k := range keys {
		select {
		case w <- event.TypedGenericEvent[rollout.Key]{Object: k}:
		default:
			late := keys[i:]
			go func() {
				for _, k := range late {
					w <- event.TypedGenericEvent[rollout.Key]{Object: k}
				}
			}()
			return
		}
	}
}

// source is the wakes as the controller's event source: each key as is.
func (w Wakes) source() source.TypedSource[rollout.Key] {
	return source.TypedChannel(w, handler.TypedFuncs[rollout.Key, rollout.Key]{
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[rollout.Key], q workqueue.TypedRateLimitingInterface[rollout.Key]) {
			q.Add(e.Object)
		},
	})
}

// WakeAll wakes every cached workload of every kind (the installation key
// changed: each is re-baselined while the previous key is still known).
func (w Wakes) WakeAll(ctx context.Context, c client.Reader, kinds *workload.Registry) error {
	for _, kind := range kinds.All() {
		list := kind.NewList()
		if err := c.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			return fmt.Errorf("while listing %s: %w", kind.Resource, err)
		}
		items := kind.Items(list)
		keys := make([]rollout.Key, 0, len(items))
		for _, o := range items {
			keys = append(keys, rollout.Key{Kind: kind.Name, Namespace: o.GetNamespace(), Name: o.GetName()})
		}
		w.Wake(keys...)
	}
	return nil
}
