package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// Event reasons.
const (
	ReasonConfigChanged = "ConfigChanged"
	ReasonInvalidValue  = "InvalidValue"
)

// FieldManager is the field manager of every write configstamp makes.
const FieldManager = "configstamp"

// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets;daemonsets,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=configmaps;secrets;namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// WorkloadReconciler keeps one kind of workload stamped with the hash of the
// data its pod template references.
type WorkloadReconciler struct {
	Client   client.Client
	Kind     WorkloadKind
	Resolver *Resolver
	Recorder events.EventRecorder
	// MaxConcurrentReconciles bounds parallel reconciles of this kind.
	MaxConcurrentReconciles int
}

var _ reconcile.Reconciler = &WorkloadReconciler{}

// Reconcile recomputes the workload's hash from cached data and, per Decide,
// records a baseline or stamps the template (one rollout).
func (r *WorkloadReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	logger := log.FromContext(ctx)
	obj := r.Kind.New()
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		return reconcile.Result{}, nil
	}
	tmpl := PodTemplate(obj)

	ns := &corev1.Namespace{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: req.Namespace}, ns); err != nil {
		return reconcile.Result{}, fmt.Errorf("while reading namespace %s: %w", req.Namespace, err)
	}
	enabled, enabledProblems := stamp.Enabled(obj.GetLabels(), ns.Labels)

	comp, err := r.Resolver.Compute(ctx, req.Namespace, obj.GetAnnotations(), tmpl)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !enabled && len(comp.Selected) == 0 {
		// Neither opted in nor matched by a rollout selector: not ours.
		return reconcile.Result{}, nil
	}
	for _, p := range enabledProblems {
		r.warn(obj, p)
	}
	for _, p := range comp.Problems {
		if p.Source == nil {
			r.warn(obj, p.Problem)
		}
	}

	stamped := tmpl.Annotations[stamp.AnnotationHash]
	recorded := obj.GetAnnotations()[stamp.AnnotationAppliedHash]
	previousSources := stamp.ParseSources(obj.GetAnnotations()[stamp.AnnotationSources])
	sources := stamp.FormatSources(comp.Sources)
	action := Decide(stamped, recorded, comp.Hash)
	if action == Nothing && obj.GetAnnotations()[stamp.AnnotationSources] != sources {
		action = Record
	}
	if action == Nothing {
		return reconcile.Result{}, nil
	}

	meta := map[string]any{stamp.AnnotationAppliedHash: comp.Hash, stamp.AnnotationSources: sources}
	patch := map[string]any{"metadata": map[string]any{"annotations": meta}}
	if action == Rollout {
		patch["spec"] = map[string]any{"template": map[string]any{"metadata": map[string]any{
			"annotations": map[string]any{stamp.AnnotationHash: comp.Hash}}}}
	}
	raw, err := json.Marshal(patch)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := r.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, raw), client.FieldOwner(FieldManager)); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, fmt.Errorf("while patching %s %s: %w", r.Kind.Name, req.NamespacedName, err)
	}

	if action == Rollout && PodTemplate(obj).Annotations[stamp.AnnotationHash] != comp.Hash {
		// The webhook's consistent read disagreed with this cache (it lags behind a
		// write the webhook already saw) and kept the right stamp: nothing rolled.
		logger.V(1).Info("webhook corrected a stale hash", "proposed", comp.Hash,
			"kept", PodTemplate(obj).Annotations[stamp.AnnotationHash])
		return reconcile.Result{}, nil
	}
	if action == Rollout {
		changed := stamp.Changed(previousSources, comp.Sources)
		names := make([]string, len(changed))
		for i, c := range changed {
			names[i] = c.String()
		}
		what := strings.Join(names, ", ")
		if what == "" {
			what = "referenced data"
		}
		logger.Info("rolling out for changed configuration", "changed", names, "hash", comp.Hash, "previous", stamped)
		r.Recorder.Eventf(obj, nil, corev1.EventTypeNormal, ReasonConfigChanged, "Rollout",
			"%s changed: pod template stamped with %s=%s", what, stamp.AnnotationHash, comp.Hash)
	} else {
		logger.V(1).Info("recorded hash", "hash", comp.Hash, "baseline", stamped == "" && recorded == "")
	}
	return reconcile.Result{}, nil
}

func (r *WorkloadReconciler) warn(obj client.Object, p stamp.Problem) {
	r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonInvalidValue, "Ignore", "%s", p.String())
}

// SetupWithManager wires the reconciler: its own kind, and ConfigMap, Secret
// and Namespace events mapped to the workloads they concern.
func (r *WorkloadReconciler) SetupWithManager(mgr ctrl.Manager) error {
	m := &mapper{client: mgr.GetClient(), kind: r.Kind, recorder: r.Recorder}
	return ctrl.NewControllerManagedBy(mgr).
		Named(strings.ToLower(r.Kind.Name)).
		For(r.Kind.New(), builder.WithPredicates(workloadChanged())).
		Watches(&corev1.ConfigMap{}, m.sourceHandler(stamp.KindConfigMap), builder.WithPredicates(sourceChanged())).
		Watches(&corev1.Secret{}, m.sourceHandler(stamp.KindSecret), builder.WithPredicates(sourceChanged())).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(m.namespaceWorkloads),
			builder.WithPredicates(predicate.LabelChangedPredicate{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
}
