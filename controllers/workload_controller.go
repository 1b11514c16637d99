package controllers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// Event reasons.
const (
	ReasonConfigChanged    = "ConfigChanged"
	ReasonRolloutFailed    = "RolloutFailed"
	ReasonRolloutHalted    = "RolloutHalted"
	ReasonRolloutRecovered = "RolloutRecovered"
	// ReasonCanaryPassed: the change's canary passed; its wave goes on.
	ReasonCanaryPassed = "CanaryPassed"
	// ReasonStampDropped: the API server pruned the stamp (see roll).
	ReasonStampDropped = "StampDropped"
)

// FieldManager is the field manager of every write configstamp makes.
const FieldManager = "configstamp"

// +kubebuilder:rbac:groups=apps,resources=deployments;statefulsets;daemonsets,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups="",resources=configmaps;secrets;namespaces,verbs=get;list;watch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// WorkloadReconciler keeps the workloads of every kind stamped with the hash
// of the data their pod templates reference, and follows the rollouts it
// starts: one controller, one queue keyed by rollout.Key (kind, namespace,
// name), since the budget, the wave and a halt span all kinds.
type WorkloadReconciler struct {
	Client client.Client
	// APIReader reads live: the UID of a ConfigMap or Secret an event is about
	// (the cache keeps none), and the resourceVersion of a source whose record
	// is newer than the cache. Nil: neither.
	APIReader client.Reader
	// Kinds are every kind configstamp handles, each watched by the one
	// controller; a key's Kind names one of them (nil: the built-in kinds).
	Kinds    *workload.Registry
	Resolver *workload.Resolver
	Recorder events.EventRecorder
	// Scheduler spreads rollouts (debounce, budget, rate, wave order).
	Scheduler *rollout.Scheduler
	// Wakes queues the reconciles of workloads from outside their own
	// events (slots freed, the key changed); nil: none are woken.
	Wakes Wakes
	// MaxConcurrentReconciles bounds the controller's parallel reconciles,
	// all kinds together.
	MaxConcurrentReconciles int
	// Scope: workloads in namespaces out of it are not ours. Nil: every namespace.
	Scope *workload.Scope
	// Pin: pinning is installed (--pin); its revisions are cached, and a
	// failed pinned workload can be undone.
	Pin bool
	// Adopted is closed once the previous release's records are taken over
	// (Adopter); reconciles wait for it. Nil: nothing to wait for.
	Adopted <-chan struct{}

	// podsUnreadable: the workloads (by UID) told that their pods cannot be
	// listed (ReasonPodsUnreadable), once per process.
	podsUnreadable sync.Map
}

var _ reconcile.TypedReconciler[rollout.Key] = &WorkloadReconciler{}

// kindReconciler is the WorkloadReconciler for one reconcile of a workload
// of Kind: what it reads and writes is that kind's.
type kindReconciler struct {
	*WorkloadReconciler
	Kind workload.Kind
}

// plan is what the reconciler found a workload needs.
type plan struct {
	comp         *workload.Computation
	priority     int
	window       time.Duration
	verifyWindow time.Duration
	canary       bool
}

// observed is one workload as the reconciler saw it: what the wave's rules
// decide on (rollout.Observation), and the computation a stamp or a record writes.
type observed struct {
	rollout.Observation
	comp *workload.Computation
}

// Reconcile finds the key's kind, observes the workload (the workload, its
// record, the hash of its data, what it needs), asks the rollout package for
// the one decision all the wave's rules make of that
// (rollout.Scheduler.Decide), and acts on it with one patch and its events.
func (r *WorkloadReconciler) Reconcile(ctx context.Context, key rollout.Key) (reconcile.Result, error) {
	kind, ok := r.Kinds.Named(key.Kind)
	if !ok { // no key of an unknown kind is ever queued
		return reconcile.Result{}, reconcile.TerminalError(fmt.Errorf("unknown workload kind %q", key.Kind))
	}
	rollout.ReconcilesTotal.WithLabelValues(kind.Name).Inc()
	if !r.adopted() {
		return reconcile.Result{RequeueAfter: time.Second}, nil
	}
	k := &kindReconciler{WorkloadReconciler: r, Kind: kind}
	o, err := k.observe(ctx, key)
	if o == nil || err != nil {
		return reconcile.Result{}, err
	}
	d, err := r.Scheduler.Decide(ctx, o.Observation)
	if err != nil {
		return reconcile.Result{}, err
	}
	return k.act(ctx, o, d)
}

// adopted reports whether the previous release's records were taken over
// (Adopter): until then no record can be judged.
func (r *WorkloadReconciler) adopted() bool {
	if r.Adopted == nil {
		return true
	}
	select {
	case <-r.Adopted:
		return true
	default:
		return false
	}
}

// observe reads the workload from the cache and what the rules decide on;
// nil while it is being deleted. A workload gone has no Object.
func (r *kindReconciler) observe(ctx context.Context, key rollout.Key) (*observed, error) {
	o := &observed{Observation: rollout.Observation{Key: key, Kind: r.Kind}}
	obj := r.Kind.New()
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: key.Namespace, Name: key.Name}, obj); err != nil {
		if apierrors.IsNotFound(err) {
			return o, nil
		}
		return nil, err
	}
	if !obj.GetDeletionTimestamp().IsZero() {
		return nil, nil
	}
	o.Object = obj
	o.Verification = r.verification(ctx, obj)
	p, err := r.compute(ctx, obj)
	if p == nil || err != nil { // neither opted in nor matched by a rollout selector: not ours
		return o, err
	}
	o.comp, o.Ours, o.Hash, o.Sources, o.Priority, o.Window = p.comp, true, p.comp.Hash, p.comp.Sources, p.priority, p.window
	o.VerifyWindow, o.Canary = p.verifyWindow, p.canary
	if o.Need, o.CacheBehind, err = r.need(ctx, obj, p.comp); err != nil {
		return nil, err
	}
	return o, nil
}

// act carries out d with one patch, and tells what happened with events.
func (r *kindReconciler) act(ctx context.Context, o *observed, d rollout.Decision) (reconcile.Result, error) {
	obj, res := o.Object, reconcile.Result{RequeueAfter: d.After}
	if d.Halted != "" {
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonRolloutHalted, "Wait",
			"not rolling out: the change %s failed on another workload; the halt lifts when what that workload references of the source changes again, "+
				"or when that workload recovers, is deleted, or loses its %s annotation", d.Halted, rollout.AnnotationHalted)
	}
	switch d.Verb {
	case rollout.Resume:
		return res, r.recovered(ctx, obj, d)
	case rollout.PassCanary:
		if stale, err := r.closeRecord(ctx, obj, r.sealed(obj, *d.Record), r.holdPatch(ctx, obj, d)); stale || err != nil {
			return reconcile.Result{RequeueAfter: rollout.StaleRecheck}, err
		}
		r.Scheduler.CanaryWritten(o.Key, d.Judged, *d.Record)
		rollout.CanariesTotal.WithLabelValues("passed", r.Kind.Name).Inc()
		log.FromContext(ctx).Info("canary passed; the change rolls on", "cause", d.Judged.Cause, "elapsed", time.Since(d.Judged.Started).Round(time.Second).String())
		r.Recorder.Eventf(obj, nil, corev1.EventTypeNormal, ReasonCanaryPassed, "Canary",
			"the canary of %s passed: its first new pod stayed healthy for %v; the rest of this workload and the other workloads of the change roll on",
			d.Judged.Cause, o.VerifyWindow)
		r.Wakes.Wake(d.Wake...)
	case rollout.Close:
		if stale, err := r.closeRecord(ctx, obj, r.sealed(obj, *d.Record), r.holdPatch(ctx, obj, d)); stale || err != nil {
			return reconcile.Result{RequeueAfter: rollout.StaleRecheck}, err
		}
		r.Scheduler.CanaryWritten(o.Key, d.Judged, *d.Record)
		switch {
		case d.Judged.Undo != "":
			r.reportUndo(ctx, obj, d)
		case d.Failure != "":
			rollout.FailedTotal.WithLabelValues(r.Kind.Name).Inc()
			if d.Judged.State == rollout.Verifying {
				rollout.FailedVerificationTotal.WithLabelValues(r.Kind.Name).Inc()
			}
			if d.Judged.Canary == rollout.CanaryRunning {
				rollout.CanariesTotal.WithLabelValues("failed", r.Kind.Name).Inc()
			}
			r.reportFailure(ctx, obj, d.Judged, d.Failure)
			r.undoFailed(ctx, obj, *d.Record, d.Hold)
		default:
			if d.Judged.Canary == rollout.CanaryRunning {
				rollout.CanariesTotal.WithLabelValues("passed", r.Kind.Name).Inc()
			}
			rollout.CompletedTotal.WithLabelValues(r.Kind.Name).Inc()
			log.FromContext(ctx).Info("rollout completed", "elapsed", time.Since(d.Judged.Started).Round(time.Second).String())
		}
		r.Wakes.Wake(d.Wake...) // a slot is free: the next in line need not wait for their recheck
	case rollout.StartVerify:
		if stale, err := r.closeRecord(ctx, obj, r.sealed(obj, *d.Record), r.holdPatch(ctx, obj, d)); stale || err != nil {
			return reconcile.Result{RequeueAfter: rollout.StaleRecheck}, err
		}
		log.FromContext(ctx).Info("rollout complete; verifying that it stays healthy", "until", d.Record.Until.UTC().Format(time.RFC3339),
			"elapsed", time.Since(d.Judged.Started).Round(time.Second).String())
	case rollout.Baseline:
		return res, r.record(ctx, obj, o.comp)
	case rollout.Stamp:
		if stale, err := r.roll(ctx, o, d); stale || err != nil {
			return reconcile.Result{RequeueAfter: rollout.StaleRecheck}, err
		}
	}
	return res, nil
}

// sealed is rec as annotations, sealed with the key it was made with (which
// Verify found).
func (r *kindReconciler) sealed(obj client.Object, rec rollout.Record) map[string]any {
	return rec.Annotations(obj.GetUID(), rec.Key())
}

// recovered lifts the halt of a failed workload whose rollout is complete
// again; its update wakes the workloads that waited (haltLifted).
func (r *kindReconciler) recovered(ctx context.Context, obj client.Object, d rollout.Decision) error {
	rec := *d.Record
	meta := r.sealed(obj, rec.Resume())
	err := patchAnnotations(ctx, r.Client, obj, "", meta, r.holdPatch(ctx, obj, d))
	if _, err = r.landed(ctx, obj, meta, err); err != nil {
		return err
	}
	log.FromContext(ctx).Info("failed workload recovered; halt lifted", "halted", rec.Halted)
	r.Recorder.Eventf(obj, nil, corev1.EventTypeNormal, ReasonRolloutRecovered, "Resume",
		"the workload is complete again: the halt of %s is lifted and its rollout to other workloads resumes", rec.Halted)
	return nil
}

func (r *kindReconciler) reportFailure(ctx context.Context, obj client.Object, rec rollout.Record, reason string) {
	halting := r.Scheduler.Policy.HaltOnFailure && rec.Cause != ""
	log.FromContext(ctx).Info("rollout failed", "cause", rec.Cause, "reason", reason, "halting", halting)
	then := "; configstamp does not halt other rollouts (--halt-on-failure=false)"
	if halting {
		then = "; configstamp halts further rollouts of this change until what this workload references of the source changes again, this workload recovers or is deleted, or its " +
			rollout.AnnotationHalted + " annotation is removed"
	}
	r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, ReasonRolloutFailed, "Halt",
		"rollout for %s failed: %s%s", rec.Cause, reason, then)
	if !halting {
		return
	}
	for _, c := range rollout.ParseChanges(rec.Cause) {
		src := sourceReference(ctx, r.APIReader, obj.GetNamespace(), c.Ref)
		r.Recorder.Eventf(src, obj, corev1.EventTypeWarning, ReasonRolloutFailed, "Halt",
			"this change made the rollout of %s %s fail; its rollout to other workloads is halted", r.Kind.Name, obj.GetName())
	}
}

// compute resolves and hashes obj's references; nil when obj is not ours.
func (r *kindReconciler) compute(ctx context.Context, obj client.Object) (*plan, error) {
	ns := &corev1.Namespace{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: obj.GetNamespace()}, ns); err != nil {
		return nil, fmt.Errorf("while reading namespace %s: %w", obj.GetNamespace(), err)
	}
	if !r.Scope.InScope(ns.Name, ns.Labels) {
		return nil, nil
	}
	enabled, problems := stamp.Enabled(obj.GetLabels(), ns.Labels)
	tmpl := r.Kind.PodTemplate(obj)
	if tmpl == nil { // an extra kind's object with no template there (an Argo Rollout with workloadRef) or a malformed one
		if enabled {
			r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, workload.ReasonInvalidValue, "Ignore",
				"no pod template configstamp can read at %s: not stamped", strings.Join(r.Kind.TemplateFields(), "."))
		}
		return nil, nil
	}
	comp, err := r.Resolver.Compute(ctx, obj.GetNamespace(), obj.GetAnnotations(), tmpl)
	if tooMany := (*workload.TooManyReferences)(nil); errors.As(err, &tooMany) {
		if enabled {
			r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, workload.ReasonInvalidValue, "Ignore", "%s", tooMany.Problem().String())
		}
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !enabled && len(comp.Selected) == 0 {
		return nil, nil
	}
	for _, p := range comp.Problems {
		if p.Source == nil {
			problems = append(problems, p.Problem)
		}
	}
	p := &plan{comp: comp}
	var pp, dp *stamp.Problem
	p.priority, pp = rollout.Priority(obj.GetAnnotations())
	p.window, dp = rollout.Debounce(obj.GetAnnotations(), r.Scheduler.Policy.Debounce)
	var vp *stamp.Problem
	p.verifyWindow, vp = rollout.VerifyWindow(obj.GetAnnotations(), r.Scheduler.Policy.VerifyWindow)
	p.canary, problems = canaryWanted(obj, ns, r.Scheduler.Policy.Canary, problems)
	for _, problem := range append(problems, deref(pp, dp, vp)...) {
		r.Recorder.Eventf(obj, nil, corev1.EventTypeWarning, workload.ReasonInvalidValue, "Ignore", "%s", problem.String())
	}
	return p, nil
}

// canaryWanted reads rollout.AnnotationCanaryOpt of obj and ns (def: --canary),
// adding a bad value to problems.
func canaryWanted(obj client.Object, ns *corev1.Namespace, def bool, problems []stamp.Problem) (bool, []stamp.Problem) {
	on, bad := rollout.CanaryWanted(obj.GetAnnotations(), ns.Annotations, def)
	return on, append(problems, bad...)
}

func deref(ps ...*stamp.Problem) []stamp.Problem {
	var out []stamp.Problem
	for _, p := range ps {
		if p != nil {
			out = append(out, *p)
		}
	}
	return out
}

// need applies the no-surprise-rollout rule (rollout.NeedOf) to obj and comp.
// cacheBehind: the stamp was written from a live read newer than this cache
// (a ConfigMap and a workload applied together); ask again once it caught up.
func (r *kindReconciler) need(ctx context.Context, obj client.Object, comp *workload.Computation) (rollout.Need, bool, error) {
	a := obj.GetAnnotations()
	f := rollout.Facts{
		Stamped: r.Kind.PodTemplate(obj).Annotations[stamp.AnnotationHash], Recorded: a[stamp.AnnotationAppliedHash],
		RecordedKey: a[stamp.AnnotationKeyID], Computed: comp.Hash, Key: comp.KeyID,
		Bookkeeping: a[stamp.AnnotationSources] != sourcesRecord(comp) || a[stamp.AnnotationKeyID] != comp.KeyID,
	}
	if f.RecordedKey != "" && f.RecordedKey != f.Key {
		if h := r.Resolver.Keys.ByID(f.RecordedKey); h != nil {
			f.RecordedUnderKey = h.Compute(obj.GetNamespace(), comp.Refs, comp.Data).Hash
		}
	}
	need := rollout.NeedOf(f)
	if need == rollout.NeedNothing {
		return need, false, nil
	}
	recorded := stamp.ParseVersions(a[stamp.AnnotationSourceVersions])
	if stale, _ := stamp.CompareVersions(recorded, comp.Versions); stale {
		behind, err := r.cacheBehind(ctx, obj.GetNamespace(), recorded, comp.Versions)
		if err != nil || behind {
			log.FromContext(ctx).V(1).Info("cache behind the recorded source versions; waiting")
			return need, behind, err
		}
		// The record names versions this cluster never had (a restore, a
		// migration from another etcd): the data read now is the newest there is.
	}
	return need, false, nil
}

// cacheBehind tells a cache that lags behind a live-read stamp from a record
// whose versions come from another etcd: a live read (metadata only) of each
// source the cache has older than recorded. At most one read per such source.
func (r *kindReconciler) cacheBehind(ctx context.Context, namespace string, recorded, cached map[stamp.ObjectRef]string) (bool, error) {
	if r.APIReader == nil {
		return true, nil
	}
	for ref, rv := range recorded {
		if older, _ := stamp.Older(cached[ref], rv); !older {
			continue
		}
		live, err := liveVersion(ctx, r.APIReader, namespace, ref)
		if err != nil {
			return false, err
		}
		if older, _ := stamp.Older(live, rv); !older {
			return true, nil // the API server has it: the cache will too
		}
	}
	return false, nil
}

// recordAnnotations is comp's record (workload.Computation.Record, the same
// the webhook writes) as a merge patch of the workload's annotations: an
// empty value removes the annotation.
func recordAnnotations(comp *workload.Computation) map[string]any {
	out := map[string]any{}
	for k, v := range comp.Record() {
		out[k] = nil
		if v != "" {
			out[k] = v
		}
	}
	return out
}

// sourcesRecord is the value the record gives AnnotationSources ("" when none).
func sourcesRecord(comp *workload.Computation) string {
	return comp.Record()[stamp.AnnotationSources]
}

// record writes the record only (a baseline, a re-baseline, bookkeeping).
func (r *kindReconciler) record(ctx context.Context, obj client.Object, comp *workload.Computation) error {
	stamped := r.Kind.PodTemplate(obj).Annotations[stamp.AnnotationHash]
	err := r.patch(ctx, obj, recordAnnotations(comp), "")
	log.FromContext(ctx).V(1).Info("recorded hash", "hash", comp.Hash, "baseline", stamped == "")
	return err
}

// roll stamps the template and writes the record and the rollout's start in
// one patch: exactly one rollout. The patch applies to the version of the
// workload that was judged only: a cache behind this process's own stamp
// (the next reconcile can run before the watch delivers it), or behind any
// other write, must not stamp again (stale: nothing was written; ask again).
// The slot Decide granted goes back (Release) when the stamp did not happen;
// a superseding stamp keeps the slot its rollout under way holds.
func (r *kindReconciler) roll(ctx context.Context, o *observed, d rollout.Decision) (bool, error) {
	obj, comp := o.Object, o.comp
	previous := r.Kind.PodTemplate(obj).Annotations[stamp.AnnotationHash]
	meta := recordAnnotations(comp)
	if d.Record != nil {
		maps.Copy(meta, d.Record.Annotations(obj.GetUID(), comp.Hasher))
	}
	spec := mergePatches(stampPatch(r.Kind.TemplateFields(), comp.Hash), r.holdPatch(ctx, obj, d))
	err := patchAnnotations(ctx, r.Client, obj, obj.GetResourceVersion(), meta, spec)
	if live, lerr := r.landed(ctx, obj, meta, err); live != nil {
		o.Object, obj = live, live
	} else if lerr != nil {
		if !d.Supersedes {
			r.Scheduler.Release(o.Key)
		}
		if apierrors.IsConflict(lerr) {
			log.FromContext(ctx).V(1).Info("workload changed since it was read; asking again", "hash", comp.Hash)
			return true, nil
		}
		return false, lerr
	}
	stamped, rolled, err := r.kept(ctx, o, previous)
	if !rolled {
		r.Scheduler.Release(o.Key)
		return false, err
	}
	r.started(ctx, obj, d, previous, stamped)
	return false, nil
}

// kept reads the stamp the patch left (obj as the API server returned it):
// the one proposed, or the webhook's, whose consistent read disagreed with
// this cache (it lags behind a write the webhook already saw). rolled: the
// template changed.
func (r *kindReconciler) kept(ctx context.Context, o *observed, previous string) (string, bool, error) {
	tmpl := r.Kind.PodTemplate(o.Object)
	kept := tmpl.Annotations[stamp.AnnotationHash]
	if kept != o.comp.Hash {
		log.FromContext(ctx).V(1).Info("webhook corrected a stale hash", "proposed", o.comp.Hash, "kept", kept)
	}
	switch {
	case kept == "":
		// The patch succeeded, yet the template carries no stamp: the API
		// server pruned it (a CRD whose schema drops unknown fields of the
		// template's metadata). Nothing can roll this workload; say so.
		r.Recorder.Eventf(o.Object, nil, corev1.EventTypeWarning, ReasonStampDropped, "Rollout",
			"the API server dropped %s from %s.metadata.annotations: this kind's CRD prunes the pod template's metadata, so configstamp cannot roll it "+
				"(keep the template's metadata in the CRD schema, e.g. controller-gen crd:generateEmbeddedObjectMeta=true)",
			stamp.AnnotationHash, strings.Join(r.Kind.TemplateFields(), "."))
		return "", false, nil
	case kept == previous && kept != o.comp.Hash: // the stamp stands: nothing rolled
		if pin.Pinned(tmpl) != nil {
			// A snapshot could not be made (the webhook's PinFailed event
			// says why): retried with the controller's backoff.
			return "", false, fmt.Errorf("the webhook kept the stamp %s: the new snapshot could not be made", previous)
		}
		return "", false, nil
	}
	// The proposed hash, or a newer one than this cache knows: it rolled,
	// with the open record written by the same patch.
	return kept, true, nil
}

// started tells that a rollout started: the metric, the log and a
// ConfigChanged event naming what changed.
func (r *kindReconciler) started(ctx context.Context, obj client.Object, d rollout.Decision, previous, stamped string) {
	rollout.StartedTotal.WithLabelValues(r.Kind.Name).Inc()
	names := make([]string, len(d.Causes))
	for i, c := range d.Causes {
		names[i] = c.Ref.String()
	}
	what := strings.Join(names, ", ")
	if what == "" {
		what = "referenced data"
	}
	log.FromContext(ctx).Info("rolling out for changed configuration", "changed", names, "hash", stamped, "previous", previous,
		"supersedes", d.Supersedes)
	then := ""
	if d.Supersedes {
		then = "; this rollout supersedes the one under way, keeping its slot"
	}
	switch {
	case d.Record != nil && d.Record.Canary == rollout.CanaryRunning && len(d.Hold) > 0:
		then += "; this workload is the change's canary: one new pod first, judged for its verification window, before any other pod or workload gets the change"
	case d.Record != nil && d.Record.Canary == rollout.CanaryRunning:
		then += "; this workload is the change's canary: no other workload gets the change before its rollout completes and is verified"
	}
	r.Recorder.Eventf(obj, nil, corev1.EventTypeNormal, ReasonConfigChanged, "Rollout",
		"%s changed: pod template stamped with %s=%s%s", what, stamp.AnnotationHash, stamped, then)
}

// closeRecord writes the rollout record meta (closed, or verifying), and
// extra (the canary's hold put back), but only on the version of
// the workload that was judged (a resourceVersion precondition): a cache that
// has not yet seen an earlier close, or a newer rollout started since, must
// not be closed again. stale: the workload had changed; nothing was written.
func (r *kindReconciler) closeRecord(ctx context.Context, obj client.Object, meta, extra map[string]any) (bool, error) {
	patch := map[string]any{"metadata": map[string]any{"resourceVersion": obj.GetResourceVersion(), "annotations": meta}}
	maps.Copy(patch, extra)
	raw, err := json.Marshal(patch)
	if err != nil {
		return false, err
	}
	err = r.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, raw), client.FieldOwner(FieldManager))
	if live, lerr := r.landed(ctx, obj, meta, err); live != nil {
		err = nil
	} else {
		err = lerr
	}
	switch {
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("while closing the rollout record of %s %s/%s: %w", r.Kind.Name, obj.GetNamespace(), obj.GetName(), err)
	}
	return false, nil
}

// patch merge-patches the workload's metadata annotations (nil deletes one)
// and, when templateHash is set, the pod template's stamp: only these fields,
// so GitOps tools and kubectl apply do not fight over anything else.
func (r *kindReconciler) patch(ctx context.Context, obj client.Object, meta map[string]any, templateHash string) error {
	return r.patchAt(ctx, obj, "", meta, templateHash)
}

// patchAt is patch on the workload's version resourceVersion only ("": any).
func (r *kindReconciler) patchAt(ctx context.Context, obj client.Object, resourceVersion string, meta map[string]any, templateHash string) error {
	var template map[string]any
	if templateHash != "" {
		template = stampPatch(r.Kind.TemplateFields(), templateHash)
	}
	return patchAnnotations(ctx, r.Client, obj, resourceVersion, meta, template)
}

// patchAnnotations merge-patches obj's metadata annotations (nil deletes
// one) and the other fields of extra (nil: none), on version resourceVersion
// of obj only unless it is "". A workload gone meanwhile is no error.
func patchAnnotations(ctx context.Context, c client.Client, obj client.Object, resourceVersion string, meta, extra map[string]any) error {
	metadata := map[string]any{"annotations": meta}
	if resourceVersion != "" {
		metadata["resourceVersion"] = resourceVersion
	}
	patch := map[string]any{"metadata": metadata}
	maps.Copy(patch, extra)
	raw, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	if err := c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, raw), client.FieldOwner(FieldManager)); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("while patching %s/%s: %w", obj.GetNamespace(), obj.GetName(), err)
	}
	return nil
}

// stampPatch is the merge patch that sets the stamp on the pod template at path.
func stampPatch(path []string, hash string) map[string]any {
	var at any = map[string]any{"metadata": map[string]any{"annotations": map[string]any{stamp.AnnotationHash: hash}}}
	for i := len(path) - 1; i > 0; i-- {
		at = map[string]any{path[i]: at}
	}
	return map[string]any{path[0]: at}
}

// SetupWithManager wires the one workload controller: each kind's own
// events (with that kind's predicates) and its halts being lifted;
// ConfigMap, Secret and Namespace events mapped to the workloads of every
// kind that they concern; and the wakes (Wakes).
func (r *WorkloadReconciler) SetupWithManager(mgr ctrl.Manager) error {
	m := &mapper{client: mgr.GetClient(), kinds: r.Kinds, scheduler: r.Scheduler}
	b := builder.TypedControllerManagedBy[rollout.Key](mgr).
		Named(ControllerName).
		WithOptions(controller.TypedOptions[rollout.Key]{
			MaxConcurrentReconciles: r.MaxConcurrentReconciles,
			// In the options: WithOptions replaces a WithLogConstructor.
			LogConstructor: keyLogger(mgr.GetLogger().WithValues("controller", ControllerName)),
		})
	for _, kind := range r.Kinds.All() {
		b = b.Watches(kind.New(), workloadKey(kind), builder.WithPredicates(workloadChanged(kind))).
			Watches(kind.New(), haltLifted(r.Scheduler, namespaceInScope(mgr.GetClient(), r.Scope)))
	}
	return b.
		Watches(&corev1.ConfigMap{}, m.sourceHandler(stamp.KindConfigMap), builder.WithPredicates(sourceChanged())).
		Watches(&corev1.Secret{}, m.sourceHandler(stamp.KindSecret), builder.WithPredicates(sourceChanged())).
		Watches(&corev1.Namespace{}, handler.TypedEnqueueRequestsFromMapFunc(m.namespaceWorkloads),
			builder.WithPredicates(predicate.LabelChangedPredicate{}, inScope(r.Scope))).
		WatchesRawSource(r.Wakes.source()).
		Complete(r)
}

// ControllerName names the one workload controller (its metrics, its
// queue's, and its logs).
const ControllerName = "workload"

// keyLogger is the controller's logger for a reconcile of a key: the
// workload under its kind's name, as controller-runtime names it for a
// controller of one kind, with its namespace and name.
func keyLogger(base logr.Logger) func(*rollout.Key) logr.Logger {
	return func(key *rollout.Key) logr.Logger {
		if key == nil {
			return base
		}
		return base.WithValues(key.Kind, klog.KRef(key.Namespace, key.Name), "namespace", key.Namespace, "name", key.Name)
	}
}

// holdPatch is what d writes of the spec besides the stamp: the canary's
// hold a Stamp sets, or the hold the judged record carries put back when
// the record d writes no longer carries it (a passed canary, a rollout
// that ends, a new rollout that is no canary). Nil: nothing.
func (r *kindReconciler) holdPatch(ctx context.Context, obj client.Object, d rollout.Decision) map[string]any {
	if len(d.Hold) > 0 {
		return d.Hold.SetPatch()
	}
	if d.Judged.Hold == "" || (d.Record != nil && d.Record.Hold != "") {
		return nil
	}
	held, err := workload.DecodeHold(d.Judged.Hold)
	if err == nil {
		var back map[string]any
		if back, err = held.RestorePatch(obj); err == nil {
			return back
		}
	}
	log.FromContext(ctx).Error(err, "the canary's hold cannot be put back")
	return nil
}

// mergePatches merges JSON merge patches b into a (b wins; nested objects merged).
func mergePatches(a, b map[string]any) map[string]any {
	for k, v := range b {
		am, aok := a[k].(map[string]any)
		bm, bok := v.(map[string]any)
		if aok && bok {
			a[k] = mergePatches(am, bm)
			continue
		}
		a[k] = v
	}
	return a
}
