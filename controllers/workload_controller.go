package controllers

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
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
	"github.com/configstamp/configstamp/controllers/workload"
)

// Event reasons.
const (
	ReasonConfigChanged = "ConfigChanged"
	ReasonRolloutFailed = "RolloutFailed"
	ReasonRolloutHalted = "RolloutHalted"
)

// FieldManager is the field manager of every write configstamp makes.
const FieldManager = "configstamp"

// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets;daemonsets,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=configmaps;secrets;namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// WorkloadReconciler keeps one kind of workload stamped with the hash of the
// data its pod template references.
type WorkloadReconciler struct {
	Client client.Client
	// APIReader reads live; only for the UID of a ConfigMap or Secret an event is
	// about (the cache keeps none). Nil: events go without it.
	APIReader client.Reader
	Kind      workload.Kind
	Resolver  *workload.Resolver
	Recorder  events.EventRecorder
	// Scheduler spreads rollouts (debounce, budget, rate, wave order); shared by all kinds.
	Scheduler *Scheduler
	// MaxConcurrentReconciles bounds parallel reconciles of this kind.
	MaxConcurrentReconciles int

	haltedMu sync.Mutex
	halted   map[workloadKey]string // workloads told they wait on a halted change, and which
}

var _ reconcile.Reconciler = &WorkloadReconciler{}

// Reconcile recomputes the workload's hash from cached data and, per Decide,
// records a baseline or, when the rollout safety rules allow, stamps the
// template (one rollout). It also follows the rollouts it started.
func (r *WorkloadReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	key := workloadKey{Kind: r.Kind.Name, Namespace: req.Namespace, Name: req.Name}
	obj := r.Kind.New()
	if err := r.Client.Get(ctx, req.NamespacedName, obj); err != nil {
		if apierrors.IsNotFound(err) {
			r.Scheduler.Forget(key)
			r.Scheduler.Release(key)
			r.clearHalted(key)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		return reconcile.Result{}, nil
	}
	if started, ok := obj.GetAnnotations()[stamp.AnnotationRolloutStarted]; ok {
		// A rollout configstamp started: follow it to completion or failure
		// before starting another one on this workload.
		if res, done, err := r.follow(ctx, key, obj, started); err != nil || !done {
			return res, err
		}
	}

	ns := &corev1.Namespace{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: req.Namespace}, ns); err != nil {
		return reconcile.Result{}, fmt.Errorf("while reading namespace %s: %w", req.Namespace, err)
	}
	enabled, enabledProblems := stamp.Enabled(obj.GetLabels(), ns.Labels)
	tmpl := workload.PodTemplate(obj)
	comp, err := r.Resolver.Compute(ctx, req.Namespace, obj.GetAnnotations(), tmpl)
	if err != nil {
		return reconcile.Result{}, err
	}
	if !enabled && len(comp.Selected) == 0 {
		r.Scheduler.Forget(key) // neither opted in nor matched by a rollout selector: not ours
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

	annotations := obj.GetAnnotations()
	stamped := tmpl.Annotations[stamp.AnnotationHash]
	recorded := annotations[stamp.AnnotationAppliedHash]
	previousSources := stamp.ParseSources(annotations[stamp.AnnotationSources])
	sources := stamp.FormatSources(comp.Sources)
	action := Decide(stamped, recorded, comp.Hash)
	if action != Rollout {
		r.Scheduler.Forget(key)
		r.clearHalted(key)
	}
	if action == Nothing && annotations[stamp.AnnotationSources] != sources {
		action = Record
	}
	if action == Nothing {
		return reconcile.Result{}, nil
	}
	versions := stamp.FormatVersions(comp.Versions)
	if stale, _ := stamp.CompareVersions(stamp.ParseVersions(annotations[stamp.AnnotationSourceVersions]), comp.Versions); stale {
		// The stamp was written from a live read newer than this cache (a
		// ConfigMap and a workload applied together): wait for the cache.
		log.FromContext(ctx).V(1).Info("cache behind the recorded source versions; waiting")
		return reconcile.Result{RequeueAfter: 200 * time.Millisecond}, nil
	}
	if action == Record {
		err := r.patch(ctx, obj, map[string]any{stamp.AnnotationAppliedHash: comp.Hash, stamp.AnnotationSources: sources,
			stamp.AnnotationSourceVersions: versions}, "")
		log.FromContext(ctx).V(1).Info("recorded hash", "hash", comp.Hash, "baseline", stamped == "" && recorded == "")
		return reconcile.Result{}, err
	}

	// Rollout: which changes cause it, and may it start now?
	changed := stamp.Changed(previousSources, comp.Sources)
	causes := make([]stamp.Change, 0, len(changed))
	for _, ref := range changed {
		if src, ok := comp.Data[ref]; ok {
			causes = append(causes, stamp.Change{Ref: ref, Content: stamp.ContentID(src)})
		} else { // no longer referenced
			causes = append(causes, stamp.Change{Ref: ref, Content: "unreferenced"})
		}
	}
	if halted, err := r.haltedBy(ctx, req.Namespace, causes); err != nil || halted != "" {
		if halted != "" {
			r.noteHalted(key, obj, halted)
		}
		return reconcile.Result{}, err
	}
	r.clearHalted(key)
	window, problem := stamp.Debounce(annotations, r.Scheduler.Policy.Debounce)
	if problem != nil {
		r.warn(obj, *problem)
	}
	if wait := r.Scheduler.Debounce(key, comp.Hash, window); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	priority, problem := stamp.Priority(annotations)
	if problem != nil {
		r.warn(obj, *problem)
	}
	wait, err := r.Scheduler.Acquire(ctx, key, priority)
	if err != nil || wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, err
	}

	meta := map[string]any{stamp.AnnotationAppliedHash: comp.Hash, stamp.AnnotationSources: sources,
		stamp.AnnotationSourceVersions: versions, stamp.AnnotationHalted: nil}
	if r.Scheduler.Policy.Tracks() {
		meta[stamp.AnnotationRolloutStarted] = time.Now().UTC().Format(time.RFC3339)
		meta[stamp.AnnotationRolloutCause] = stamp.FormatChanges(causes)
	}
	if err := r.patch(ctx, obj, meta, comp.Hash); err != nil {
		r.Scheduler.Release(key)
		return reconcile.Result{}, err
	}
	if workload.PodTemplate(obj).Annotations[stamp.AnnotationHash] != comp.Hash {
		// The webhook's consistent read disagreed with this cache (it lags behind a
		// write the webhook already saw) and kept the right stamp: nothing rolled.
		log.FromContext(ctx).V(1).Info("webhook corrected a stale hash", "proposed", comp.Hash,
			"kept", workload.PodTemplate(obj).Annotations[stamp.AnnotationHash])
		return reconcile.Result{}, nil
	}
	rolloutsStarted.WithLabelValues(r.Kind.Name).Inc()
	names := make([]string, len(changed))
	for i, c := range changed {
		names[i] = c.String()
	}
	what := strings.Join(names, ", ")
	if what == "" {
		what = "referenced data"
	}
	log.FromContext(ctx).Info("rolling out for changed configuration", "changed", names, "hash", comp.Hash, "previous", stamped)
	r.Recorder.Eventf(obj, nil, corev1.EventTypeNormal, ReasonConfigChanged, "Rollout",
		"%s changed: pod template stamped with %s=%s", what, stamp.AnnotationHash, comp.Hash)
	return reconcile.Result{}, nil
}

// patch merge-patches the workload's metadata annotations (nil deletes one)
// and, when templateHash is set, the pod template's stamp: only these fields,
// so GitOps tools and kubectl apply do not fight over anything else.
func (r *WorkloadReconciler) patch(ctx context.Context, obj client.Object, meta map[string]any, templateHash string) error {
	patch := map[string]any{"metadata": map[string]any{"annotations": meta}}
	if templateHash != "" {
		patch["spec"] = map[string]any{"template": map[string]any{"metadata": map[string]any{
			"annotations": map[string]any{stamp.AnnotationHash: templateHash}}}}
	}
	raw, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	if err := r.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, raw), client.FieldOwner(FieldManager)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("while patching %s %s/%s: %w", r.Kind.Name, obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// follow tracks a rollout configstamp started. done reports that it is over
// (completed or failed, and the record cleaned up), so other work may proceed.
func (r *WorkloadReconciler) follow(ctx context.Context, key workloadKey, obj client.Object, startedAt string) (reconcile.Result, bool, error) {
	started, err := time.Parse(time.RFC3339, startedAt)
	if err != nil {
		started = time.Time{} // unreadable: treat as long started
	}
	complete, failed := rolloutState(obj, started, r.Scheduler.Policy.ProgressDeadline, time.Now())
	switch {
	case complete:
		// No PATCH: the status frees the slot (IndexRolling), the annotation stays.
		if r.Scheduler.Finished(key, startedAt) {
			rolloutsCompleted.WithLabelValues(r.Kind.Name).Inc()
			log.FromContext(ctx).Info("rollout completed", "elapsed", time.Since(started).Round(time.Millisecond).String())
		}
		return reconcile.Result{}, true, nil
	case failed:
		cause := obj.GetAnnotations()[stamp.AnnotationRolloutCause]
		halt := any(cause)
		if !r.Scheduler.Policy.HaltOnFailure || cause == "" {
			halt = nil
		}
		if err := r.patch(ctx, obj, map[string]any{stamp.AnnotationRolloutStarted: nil, stamp.AnnotationRolloutCause: nil,
			stamp.AnnotationHalted: halt}, ""); err != nil {
			return reconcile.Result{}, false, err
		}
		r.Scheduler.Finished(key, startedAt)
		rolloutsFailed.WithLabelValues(r.Kind.Name).Inc()
		log.FromContext(ctx).Info("rollout failed; halting the rollouts of the same change", "cause", cause)
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonRolloutFailed, "Halt",
			"rollout for %s did not complete; configstamp halts further rollouts of this change until it changes again", cause)
		for _, c := range stamp.ParseChanges(cause) {
			src := sourceReference(ctx, r.APIReader, obj.GetNamespace(), c.Ref)
			r.Recorder.Eventf(src, obj, corev1.EventTypeWarning, ReasonRolloutFailed, "Halt",
				"this change made the rollout of %s %s fail; its rollout to other workloads is halted until the %s changes again",
				r.Kind.Name, obj.GetName(), c.Ref.Kind)
		}
		return reconcile.Result{}, true, nil
	}
	r.Scheduler.Following(key, startedAt)
	if _, isDeployment := obj.(*appsv1.Deployment); !isDeployment && !started.IsZero() {
		// StatefulSets and DaemonSets have no progress deadline of their own.
		return reconcile.Result{RequeueAfter: time.Until(started.Add(r.Scheduler.Policy.ProgressDeadline)) + time.Second}, false, nil
	}
	return reconcile.Result{}, false, nil
}

// haltedBy returns the first of causes that failed on some workload of the
// namespace (IndexHalted), or "".
func (r *WorkloadReconciler) haltedBy(ctx context.Context, namespace string, causes []stamp.Change) (string, error) {
	for _, c := range causes {
		for _, kind := range workload.Kinds {
			list := kind.NewList()
			if err := r.Client.List(ctx, list, client.InNamespace(namespace),
				client.MatchingFields{IndexHalted: c.String()}, client.UnsafeDisableDeepCopy); err != nil {
				return "", fmt.Errorf("while looking up halted changes: %w", err)
			}
			if len(kind.Items(list)) > 0 {
				return c.String(), nil
			}
		}
	}
	return "", nil
}

func (r *WorkloadReconciler) noteHalted(key workloadKey, obj client.Object, change string) {
	r.Scheduler.Forget(key)
	r.haltedMu.Lock()
	defer r.haltedMu.Unlock()
	if r.halted == nil {
		r.halted = map[workloadKey]string{}
	}
	if r.halted[key] == change {
		return
	}
	r.halted[key] = change
	haltedWorkloads.Inc()
	rolloutsHalted.Inc()
	r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonRolloutHalted, "Wait",
		"not rolling out: the change %s failed on another workload; a newer change lifts the halt", change)
}

func (r *WorkloadReconciler) clearHalted(key workloadKey) {
	r.haltedMu.Lock()
	defer r.haltedMu.Unlock()
	if _, ok := r.halted[key]; ok {
		delete(r.halted, key)
		haltedWorkloads.Dec()
	}
}

func (r *WorkloadReconciler) warn(obj client.Object, p stamp.Problem) {
	r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, workload.ReasonInvalidValue, "Ignore", "%s", p.String())
}

// SetupWithManager wires the reconciler: its own kind, and ConfigMap, Secret
// and Namespace events mapped to the workloads they concern.
func (r *WorkloadReconciler) SetupWithManager(mgr ctrl.Manager) error {
	m := &mapper{client: mgr.GetClient(), apiReader: r.APIReader, kind: r.Kind, recorder: r.Recorder}
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
