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
	"k8s.io/apimachinery/pkg/runtime"
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

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// Event reasons of the rollout lifecycle (the rollout package's decisions
// emit them).
const (
	ReasonConfigChanged    = rollout.ReasonConfigChanged
	ReasonRolloutFailed    = rollout.ReasonRolloutFailed
	ReasonRolloutHalted    = rollout.ReasonRolloutHalted
	ReasonRolloutRecovered = rollout.ReasonRolloutRecovered
	ReasonCanaryPassed     = rollout.ReasonCanaryPassed
	ReasonStampDropped     = rollout.ReasonStampDropped
	ReasonHoldRejected     = rollout.ReasonHoldRejected
	ReasonPauseLifted      = rollout.ReasonPauseLifted
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
	// notes: what this reconcile's observe found to tell (Observation.Notes).
	notes []rollout.Event
}

// note adds an event of what observe found (a bad value, pods it may not
// list, NotReady nodes) to the observation's Notes.
func (r *kindReconciler) note(typ, reason, action, format string, args ...any) {
	r.notes = append(r.notes, rollout.Event{Type: typ, Reason: reason, Action: action, Message: fmt.Sprintf(format, args...)})
}

// computed is what compute found of a workload: its data and its rollout settings.
type computed struct {
	comp         *workload.Computation
	priority     int
	window       time.Duration
	verifyWindow time.Duration
	canary       bool
	rotation     rollout.Rotation
}

// Reconcile finds the key's kind, observes the workload (the workload, its
// record, the hash of its data, what it needs), asks the rollout package for
// the one decision all the wave's rules make of that
// (rollout.Scheduler.Decide), and applies it (act).
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
	k.tell(ctx, o.Object, rollout.Effects{Events: o.Notes}) // whatever the decision
	d, err := r.Scheduler.Decide(ctx, *o)
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
func (r *kindReconciler) observe(ctx context.Context, key rollout.Key) (*rollout.Observation, error) {
	o := &rollout.Observation{Key: key, Kind: r.Kind}
	defer func() { o.Notes = r.notes }()
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
	ns := &corev1.Namespace{}
	if err := r.Client.Get(ctx, client.ObjectKey{Name: obj.GetNamespace()}, ns); err != nil {
		return nil, fmt.Errorf("while reading namespace %s: %w", obj.GetNamespace(), err)
	}
	if !r.Scope.InScope(ns.Name, ns.Labels) {
		o.OutOfScope = true
		return o, nil
	}
	o.Verification = r.verification(ctx, obj)
	o.Undo = r.undoFacts(ctx, obj, o.Verification)
	o.ReadAt = time.Now()
	p, err := r.compute(ctx, obj, ns)
	if p == nil || err != nil { // neither opted in nor matched by a rollout selector: not ours
		return o, err
	}
	o.Data, o.Ours, o.Hash, o.Sources, o.Priority, o.Window = p.comp, true, p.comp.Hash, p.comp.Sources, p.priority, p.window
	o.VerifyWindow, o.Canary, o.Rotation = p.verifyWindow, p.canary, p.rotation
	if o.Need, o.CacheBehind, err = r.need(ctx, obj, p.comp); err != nil {
		return nil, err
	}
	return o, nil
}

// act applies d and decides nothing: the patches in order, stopping at a
// stale read; what the stamp did; the scheduler told of the record
// written; the counters, logs and events; the undo; the wake-ups.
func (r *kindReconciler) act(ctx context.Context, o *rollout.Observation, d rollout.Decision) (reconcile.Result, error) {
	stale, err := r.write(ctx, o, d.Patches)
	if err != nil && d.Unheld != nil && rollout.HoldRejected(err) {
		r.tell(ctx, o.Object, d.Unheld.Rejected(err))
		d.Stamp = d.Unheld.Stamp
		stale, err = r.write(ctx, o, []rollout.Patch{d.Unheld.Patch})
	}
	if stale || err != nil {
		if d.Release { // it asks again at once, where it stood in the wave
			r.Scheduler.Release(o.Key)
		}
		return reconcile.Result{RequeueAfter: rollout.StaleRecheck}, err
	}
	told := d.Effects
	if d.Stamp != nil {
		landed, rolled, err := d.Stamp.Landed(r.Kind.PodTemplate(o.Object))
		r.tell(ctx, o.Object, landed)
		if !rolled && err != nil { // retried: where it stood in the wave
			r.Scheduler.Release(o.Key)
			return reconcile.Result{RequeueAfter: rollout.StaleRecheck}, err
		}
	}
	if d.Written != nil {
		r.Scheduler.CanaryWritten(o.Key, d.Judged, *d.Written)
	}
	r.tell(ctx, o.Object, told)
	if d.Undo != nil {
		thawed, err := r.restoreTemplate(ctx, o.Object, d.Undo.Failed, d.Undo.To, d.Undo.Freeze)
		done, landed := d.Undo.Done(err, r.Kind.PodTemplate(o.Object), thawed)
		if landed {
			// The undo's own rollout is followed: its record on the version
			// the undo wrote (the record's close patch came before it).
			if _, err := r.write(ctx, o, []rollout.Patch{d.Undo.Follow}); err != nil {
				log.FromContext(ctx).Error(err, "the undo's rollout is not followed: its record could not be written")
			}
		}
		r.tell(ctx, o.Object, done)
	}
	r.Wakes.Wake(d.Wake...) // a slot is free: the next in line need not wait for their recheck
	return reconcile.Result{RequeueAfter: d.After}, nil
}

// write merge-patches o.Object with each of patches in order. stale: one
// found the workload changed since it was judged, or gone; nothing more
// was written. A patch whose error leaves it unknown whether it was
// applied (a timeout) is settled by a live read (landed): when it landed,
// o.Object becomes the live workload and the write counts as done.
func (r *kindReconciler) write(ctx context.Context, o *rollout.Observation, patches []rollout.Patch) (bool, error) {
	for _, p := range patches {
		obj := o.Object
		metadata := map[string]any{"annotations": p.Meta}
		if p.Judged {
			metadata["resourceVersion"] = obj.GetResourceVersion()
		}
		patch := map[string]any{"metadata": metadata}
		maps.Copy(patch, p.Spec)
		raw, err := json.Marshal(patch)
		if err != nil {
			return false, err
		}
		err = r.Client.Patch(ctx, obj, client.RawPatch(types.MergePatchType, raw), client.FieldOwner(FieldManager))
		if live, lerr := r.landed(ctx, obj, p.Meta, err); live != nil {
			o.Object, err = live, nil
		} else {
			err = lerr
		}
		switch {
		case apierrors.IsConflict(err), apierrors.IsNotFound(err):
			log.FromContext(ctx).V(1).Info("workload changed since it was read; asking again", "writes", p.Writes)
			return true, nil
		case err != nil:
			return false, fmt.Errorf("while patching %s %s/%s: %w", r.Kind.Name, obj.GetNamespace(), obj.GetName(), err)
		}
	}
	return false, nil
}

// tell increments e's counters, logs its lines and emits its events (an
// event about a source is related to obj).
func (r *kindReconciler) tell(ctx context.Context, obj client.Object, e rollout.Effects) {
	for _, c := range e.Counts {
		c.Inc()
	}
	logger := log.FromContext(ctx)
	for _, l := range e.Logs {
		if l.Err != nil {
			logger.Error(l.Err, l.Msg, l.Values...)
		} else {
			logger.V(l.V).Info(l.Msg, l.Values...)
		}
	}
	for _, ev := range e.Events {
		var regarding, related runtime.Object = obj, nil
		if ev.Source != nil {
			regarding, related = sourceReference(ctx, r.APIReader, obj.GetNamespace(), *ev.Source), obj
		}
		r.Recorder.Eventf(regarding, related, ev.Type, ev.Reason, ev.Action, "%s", ev.Message)
	}
}

// compute resolves and hashes the references of obj, in namespace ns (in
// scope); nil when obj is not ours.
func (r *kindReconciler) compute(ctx context.Context, obj client.Object, ns *corev1.Namespace) (*computed, error) {
	enabled, problems := stamp.Enabled(obj.GetLabels(), ns.Labels)
	tmpl := r.Kind.PodTemplate(obj)
	if tmpl == nil { // an extra kind's object with no template there (an Argo Rollout with workloadRef) or a malformed one
		if enabled {
			r.note(corev1.EventTypeWarning, workload.ReasonInvalidValue, "Ignore",
				"no pod template configstamp can read at %s: not stamped", strings.Join(r.Kind.TemplateFields(), "."))
		}
		return nil, nil
	}
	comp, err := r.Resolver.Compute(ctx, obj.GetNamespace(), obj.GetAnnotations(), tmpl)
	if tooMany := (*workload.TooManyReferences)(nil); errors.As(err, &tooMany) {
		if enabled {
			r.note(corev1.EventTypeWarning, workload.ReasonInvalidValue, "Ignore", "%s", tooMany.Problem().String())
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
	p := &computed{comp: comp}
	var pp, dp *stamp.Problem
	p.priority, pp = rollout.Priority(obj.GetAnnotations())
	p.window, dp = rollout.Debounce(obj.GetAnnotations(), r.Scheduler.Policy.Debounce)
	var vp *stamp.Problem
	p.verifyWindow, vp = rollout.VerifyWindow(obj.GetAnnotations(), r.Scheduler.Policy.VerifyWindow)
	p.canary, problems = canaryWanted(obj, ns, r.Scheduler.Policy.Canary, problems)
	var rp []stamp.Problem
	p.rotation, rp = rollout.RotationOf(obj.GetAnnotations(), comp.Sources)
	problems = append(problems, rp...)
	for _, problem := range append(problems, deref(pp, dp, vp)...) {
		r.note(corev1.EventTypeWarning, workload.ReasonInvalidValue, "Ignore", "%s", problem.String())
	}
	return p, nil
}

// canaryWanted reads rollout.AnnotationCanaryOpt of obj and ns (def: --canary),
// adding a bad value to problems, and a bad rollout.LabelRing of ns (the ring
// decides whose canary judges its change).
func canaryWanted(obj client.Object, ns *corev1.Namespace, def bool, problems []stamp.Problem) (bool, []stamp.Problem) {
	on, bad := rollout.CanaryWanted(obj.GetAnnotations(), ns.Annotations, def)
	if _, _, badRing := rollout.RingOf(ns.Labels); badRing != nil {
		bad = append(bad, *badRing)
	}
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
	if need == rollout.NeedsNothing {
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

// sourcesRecord is the value the record gives AnnotationSources ("" when none).
func sourcesRecord(comp *workload.Computation) string {
	return comp.Record()[stamp.AnnotationSources]
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
