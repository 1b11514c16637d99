package controllers

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// SelectorWarner reports a ConfigMap or Secret whose rollout selector does
// not parse, once per new value: an InvalidValue Warning event on the object
// (the selector is ignored, never fatal). It is a reconciler of its own so
// that the workload reconcilers' event handlers only map events to requests.
type SelectorWarner struct {
	// Kind is the sources' kind: ConfigMap or Secret.
	Kind stamp.Kind
	// Cache holds the sources (their annotations).
	Cache client.Reader
	// APIReader reads the object's UID live for the event (the cache keeps none).
	APIReader client.Reader
	Recorder  events.EventRecorder
}

// Reconcile reports the selector of one source if it does not parse.
func (w *SelectorWarner) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	obj := pin.NewSource(w.Kind)
	if err := w.Cache.Get(ctx, req.NamespacedName, obj); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if _, _, problem := stamp.RolloutSelector(obj.GetAnnotations()); problem != nil {
		ref := sourceReference(ctx, w.APIReader, req.Namespace, stamp.ObjectRef{Kind: w.Kind, Name: req.Name})
		w.Recorder.Eventf(ref, nil, corev1.EventTypeWarning, workload.ReasonInvalidValue, "Ignore", "%s", problem.String())
	}
	return reconcile.Result{}, nil
}

// SetupWithManager follows the sources whose selector is new: created with
// one, or changed (not every resync).
func (w *SelectorWarner) SetupWithManager(mgr ctrl.Manager) error {
	none := selectorValue(pin.NewSource(w.Kind))
	changed := predicate.Funcs{
		CreateFunc:  func(e event.CreateEvent) bool { return selectorValue(e.Object) != none },
		UpdateFunc:  func(e event.UpdateEvent) bool { return selectorValue(e.ObjectNew) != selectorValue(e.ObjectOld) },
		DeleteFunc:  func(event.DeleteEvent) bool { return false },
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("rollout-selector-"+strings.ToLower(string(w.Kind))).
		For(pin.NewSource(w.Kind), builder.WithPredicates(changed)).
		Complete(w)
}
