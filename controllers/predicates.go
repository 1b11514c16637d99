package controllers

import (
	"maps"
	"reflect"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// workloadChanged passes workload updates that can change what configstamp
// decides: a new generation (template, annotations of the spec), labels (opt-in,
// template labels matched by selectors) or annotations (extra-*, the record).
// Other status-only updates, frequent during rollouts, are dropped. kind is
// the workload's kind, whose status counts its ready pods.
func workloadChanged(kind workload.Kind) predicate.Predicate {
	return predicate.Or[client.Object](
		predicate.GenerationChangedPredicate{},
		predicate.LabelChangedPredicate{},
		predicate.AnnotationChangedPredicate{},
		// Status updates matter while a rollout configstamp started is under
		// way, up to and including the one that shows it over, and while a
		// failed workload halts its change (its recovery lifts the halt).
		// Of a completed rollout, one that counts fewer pods ready: a crash
		// while its change still rolls to other workloads fails it
		// (rollout.RuleCrashing); the reconcile asks whether it does.
		predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
			return followed(e.ObjectOld) || followed(e.ObjectNew) ||
				(rollout.Read(e.ObjectNew.GetAnnotations()).State == rollout.Completed && rollout.LostReadiness(kind, e.ObjectOld, e.ObjectNew))
		}},
	)
}

// followed reports whether configstamp follows obj's status: its rollout
// record is open, or it failed and halts its change.
func followed(obj client.Object) bool {
	r := rollout.Read(obj.GetAnnotations())
	return r.Open() || (r.State == rollout.Failed && r.Halted != "")
}

// sourceAnnotations are the ConfigMap/Secret annotations that change hashes.
var sourceAnnotations = []string{stamp.AnnotationIgnore, stamp.AnnotationRolloutSelector, stamp.AnnotationPodDeleteMatch}

// sourceChanged passes ConfigMap and Secret updates whose data (digests, as
// cached) or hash-relevant annotations changed. Metadata-only updates cost nothing.
func sourceChanged() predicate.Predicate {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		return SourceDiffers(e.ObjectOld, e.ObjectNew)
	}}
}

// SourceDiffers reports whether two versions of a ConfigMap or Secret differ in
// anything that a hash or a selector depends on.
func SourceDiffers(oldObj, newObj client.Object) bool {
	oldA, newA := oldObj.GetAnnotations(), newObj.GetAnnotations()
	for _, k := range sourceAnnotations {
		if oldA[k] != newA[k] {
			return true
		}
	}
	switch o := oldObj.(type) {
	case *corev1.ConfigMap:
		n, ok := newObj.(*corev1.ConfigMap)
		return !ok || !maps.Equal(o.Data, n.Data) || !reflect.DeepEqual(o.BinaryData, n.BinaryData)
	case *corev1.Secret:
		n, ok := newObj.(*corev1.Secret)
		return !ok || !reflect.DeepEqual(o.Data, n.Data) || !maps.Equal(o.StringData, n.StringData) // cached sums: StringData

	}
	return true
}
