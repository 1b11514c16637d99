package controllers

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/workload"
)

// Nudger wakes the reconciles of workloads of any kind, from outside their
// own events: the waiters of a halt that was lifted, the next in line when a
// slot frees, every workload when the installation key changes.
type Nudger struct {
	kinds *workload.Registry
	chans map[string]chan event.TypedGenericEvent[rollout.Key]
}

// NewNudger returns a Nudger with one channel per workload kind.
func NewNudger(kinds *workload.Registry) *Nudger {
	n := &Nudger{kinds: kinds, chans: map[string]chan event.TypedGenericEvent[rollout.Key]{}}
	for _, k := range kinds.All() {
		n.chans[k.Name] = make(chan event.TypedGenericEvent[rollout.Key], 1024)
	}
	return n
}

// Wake enqueues the reconciles of keys. It never blocks the caller (an
// event handler or a reconcile): past the buffer, the rest is sent from a
// goroutine of its own.
func (n *Nudger) Wake(keys ...rollout.Key) {
	var late []rollout.Key
	for _, k := range keys {
		ch, ok := n.chans[k.Kind]
		if !ok {
			continue
		}
		select {
		case ch <- event.TypedGenericEvent[rollout.Key]{Object: k}:
		default:
			late = append(late, k)
		}
	}
	if len(late) > 0 {
		go func() {
			for _, k := range late {
				n.chans[k.Kind] <- event.TypedGenericEvent[rollout.Key]{Object: k}
			}
		}()
	}
}

// source is the event source of kind's reconciler.
func (n *Nudger) source(kind workload.Kind) source.Source {
	return source.Channel(n.chans[kind.Name], handler.TypedFuncs[rollout.Key, reconcile.Request]{
		GenericFunc: func(_ context.Context, e event.TypedGenericEvent[rollout.Key], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: e.Object.Namespace, Name: e.Object.Name}})
		},
	})
}

// WakeAll wakes every cached workload of every kind (the installation key
// changed: each is re-baselined while the previous key is still known).
func (n *Nudger) WakeAll(ctx context.Context, c client.Reader) error {
	for _, kind := range n.kinds.All() {
		list := kind.NewList()
		if err := c.List(ctx, list, client.UnsafeDisableDeepCopy); err != nil {
			return fmt.Errorf("while listing %s: %w", kind.Resource, err)
		}
		for _, o := range kind.Items(list) {
			n.Wake(rollout.Key{Kind: kind.Name, Namespace: o.GetNamespace(), Name: o.GetName()})
		}
	}
	return nil
}
