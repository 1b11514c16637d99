// Package webhook is configstamp's mutating admission webhook: it stamps opted-in
// Deployments, StatefulSets and DaemonSets (and the extra kinds of
// --kinds-config) at CREATE and UPDATE, so a new
// workload starts with the right hash and a re-applied manifest that lacks the
// stamp gets it back instead of rolling.
package webhook

import (
	"context"
	"errors"

	"github.com/go-logr/logr"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
	"github.com/configstamp/configstamp/webhook/live"
)

// Stamper is the defaulter of every workload kind: each kind's handler
// (Handlers) decodes a request into the kind's own object (typed for a
// built-in kind, unstructured for an extra one) and hands it here.
type Stamper struct {
	// Resolver reads sources live (consistent reads).
	Resolver *workload.Resolver
	// Cache reads Namespaces (their opt-in label).
	Cache    client.Reader
	Recorder events.EventRecorder
	Decoder  admission.Decoder
	// Self is configstamp's own user name. Its reconciler's patches carry the
	// source versions they were computed from and are accepted without reads
	// when those are no older than the recorded ones.
	Self string
	// Scope is the installation's: a workload in a namespace out of it is
	// admitted unchanged, whatever sent it here (a namespaceSelector edited by
	// hand, the static manifest of cert-manager mode). Nil: every namespace.
	Scope *workload.Scope
	// Snapshots makes the snapshots of pinned workloads (--pin). Nil: pinning
	// is off, and configstamp.io/pin is ignored with a warning.
	Snapshots *pin.Snapshots
	// Halts finds the halts in force (the manager's cache): a user's update of
	// a pinned workload never takes a halted change. Nil: not looked up.
	Halts *rollout.Halts
	// Kinds are the kinds this Stamper admits. Nil: the built-in kinds.
	Kinds *workload.Registry
}

var _ admission.Defaulter[runtime.Object] = &Stamper{}

// ourAnnotations are the workload metadata annotations configstamp owns.
var ourAnnotations = []string{stamp.AnnotationAppliedHash, stamp.AnnotationSources, stamp.AnnotationSourceVersions, stamp.AnnotationKeyID}

// Default stamps obj. It never returns an error: whatever goes wrong, the object
// is admitted (the reconciler is the backstop) and the reason is logged and, for
// bad user values, returned as an admission warning and a Warning event.
func (s *Stamper) Default(ctx context.Context, o runtime.Object) error {
	obj, ok := o.(client.Object)
	if !ok {
		return nil
	}
	ctx = live.Arrive(ctx) // reads shared with other admissions are sent after this
	c, ok := s.begin(ctx, obj)
	if !ok || c.req.Operation == admissionv1.Update && c.settled() && s.unchanged(c, obj, !c.pinning) {
		return nil
	}
	comp, memo := s.compute(ctx, obj, c)
	if comp == nil {
		return nil
	}
	stamped := comp.Hash
	if c.pinning {
		var kept bool
		if stamped, kept = s.pinStep(ctx, pinRequest{call: c, obj: obj, comp: comp, memo: memo}); kept {
			return nil
		}
	}
	if c.req.Operation == admissionv1.Update && c.req.UserInfo.Username != s.Self {
		s.undone(ctx, c, obj, stamped)
		s.untried(ctx, c, obj, comp)
	}
	s.stamp(c.kind, obj, stamped, comp, c.logger)
	return nil
}

// call is one admission as Default's steps share it.
type call struct {
	kind   workload.Kind
	req    admission.Request
	logger logr.Logger
	dryRun bool
	// tmpl is the object's pod template: its own, or for an extra kind a
	// typed copy (see workload.Kind.SetTemplateReferences).
	tmpl *corev1.PodTemplateSpec
	// sent is the stamp the request's template carried.
	sent string
	// wanted: pinned config is asked for (and this installation pins);
	// pinning: the template is to be pinned, or unpinned.
	wanted, pinning bool
	// old is an UPDATE's old object, decoded once (nil at CREATE, or when
	// it could not be decoded: oldErr).
	old    client.Object
	oldErr error
}

// settled reports whether the template's pins are as wanted: nothing to
// pin or unpin.
func (c call) settled() bool { return !c.pinning || c.wanted == (pin.Pinned(c.tmpl) != nil) }

// begin reads the request and reports whether obj is configstamp's to stamp:
// a live workload with a template, in scope, opted in.
func (s *Stamper) begin(ctx context.Context, obj client.Object) (call, bool) {
	req, err := admission.RequestFromContext(ctx)
	if err != nil {
		return call{}, false
	}
	kind, known := s.Kinds.Of(obj)
	if !known {
		return call{}, false
	}
	c := call{kind: kind, req: req, dryRun: req.DryRun != nil && *req.DryRun, tmpl: kind.PodTemplate(obj),
		logger: log.FromContext(ctx).WithValues("kind", req.Kind.Kind, "namespace", req.Namespace, "name", req.Name, "operation", req.Operation)}
	if c.tmpl == nil || !obj.GetDeletionTimestamp().IsZero() {
		return c, false
	}
	enabled, ns := s.optedIn(ctx, obj, req.Namespace, c.dryRun, c.logger)
	if !enabled {
		return c, false
	}
	c.sent = c.tmpl.Annotations[stamp.AnnotationHash]
	if req.Operation == admissionv1.Update {
		c.old = kind.New()
		if c.oldErr = s.Decoder.DecodeRaw(req.OldObject, c.old); c.oldErr != nil {
			c.old = nil
		}
	}
	c.wanted = s.pinWanted(ctx, obj, ns, req.Namespace, c.dryRun)
	// A pinned template is unpinned when it is no longer wanted, also by an
	// installation without --pin: its rollouts must read the sources again.
	c.pinning = c.wanted || pin.Pinned(c.tmpl) != nil
	return c, true
}

// compute hashes obj's data from live reads (through a memo when pinning, so
// that the snapshots copy exactly what the stamp hashes) and reports bad
// values; nil when there is nothing to stamp.
func (s *Stamper) compute(ctx context.Context, obj client.Object, c call) (*workload.Computation, *pin.Memo) {
	sources := s.Resolver.Sources
	var memo *pin.Memo
	if c.pinning {
		memo = pin.NewMemo(sources)
		sources = memo
	}
	comp, err := s.Resolver.ComputeFrom(ctx, sources, c.req.Namespace, obj.GetAnnotations(), c.tmpl)
	if tooMany := (*workload.TooManyReferences)(nil); errors.As(err, &tooMany) {
		s.report(ctx, obj, c.req.Namespace, tooMany.Problem(), c.dryRun)
		return nil, nil
	}
	if err != nil {
		c.logger.Error(err, "while computing the hash; admitting unchanged, the reconciler will catch up")
		return nil, nil
	}
	for _, p := range comp.Problems {
		if p.Source == nil {
			s.report(ctx, obj, c.req.Namespace, p.Problem, c.dryRun)
		}
	}
	return comp, memo
}

// stamp sets the stamp on obj's template and the data record on obj.
func (s *Stamper) stamp(kind workload.Kind, obj client.Object, stamped string, comp *workload.Computation, logger logr.Logger) {
	if !kind.SetTemplateAnnotation(obj, stamp.AnnotationHash, stamped) {
		return // no template to stamp: no record either
	}
	meta := obj.GetAnnotations()
	if meta == nil {
		meta = map[string]string{}
	}
	for k, v := range comp.Record() {
		if v == "" { // too many sources to record within the budget (see FormatRecord)
			delete(meta, k)
		} else {
			meta[k] = v
		}
	}
	obj.SetAnnotations(meta)
	logger.V(1).Info("stamped", "hash", stamped)
}

// optedIn reports whether obj, in namespace, is configstamp's to stamp: the
// namespace in scope and the workload (or its namespace) opted in. Bad
// opt-in values are reported. The namespace is returned for its other settings.
func (s *Stamper) optedIn(ctx context.Context, obj client.Object, namespace string, dryRun bool, logger logr.Logger) (bool, *corev1.Namespace) {
	ns := &corev1.Namespace{}
	err := s.Cache.Get(ctx, client.ObjectKey{Name: namespace}, ns)
	if apierrors.IsNotFound(err) {
		// Created by the same `kubectl apply` a moment ago: the cache may lag.
		err = s.Resolver.Sources.Get(ctx, client.ObjectKey{Name: namespace}, ns)
	}
	if err != nil {
		logger.Error(err, "while reading namespace; admitting unchanged")
		return false, nil
	}
	if !s.Scope.InScope(namespace, ns.Labels) {
		logger.V(1).Info("namespace out of scope; admitting unchanged")
		return false, nil
	}
	enabled, problems := stamp.Enabled(obj.GetLabels(), ns.Labels)
	for _, p := range problems {
		s.report(ctx, obj, namespace, p, dryRun)
	}
	return enabled, ns
}

// unchanged reports whether an UPDATE needs no hash computed: its template is
// otherwise unchanged (keepStamp restores what it dropped), or it is the
// reconciler's own fresh stamp (trusted only when trustFresh: a pinned
// workload's new stamp needs its snapshots, made from a read).
func (s *Stamper) unchanged(c call, obj client.Object, trustFresh bool) bool {
	if c.oldErr != nil {
		c.logger.Error(c.oldErr, "while decoding the old object; admitting unchanged")
		return true
	}
	if keepStamp(c.kind, c.old, obj) {
		return true
	}
	if trustFresh && s.Self != "" && c.req.UserInfo.Username == s.Self && freshProposal(c.kind, c.old, obj) {
		c.logger.V(1).Info("accepted the reconciler's stamp without reads")
		return true
	}
	return false
}

// keepStamp handles an UPDATE whose pod template is otherwise unchanged: it
// restores a stamp or record that the new object dropped (a re-applied manifest)
// and reports true when nothing needs computing. It reports false when the
// template changes anyway (the stamp comes for free) or when the stamp itself
// is being changed (the reconciler's patch), which is then checked against a
// consistent read so that a lagging cache never flips the hash back.
func keepStamp(kind workload.Kind, old, obj client.Object) bool {
	oldT, newT := kind.PodTemplate(old), kind.PodTemplate(obj)
	if oldT == nil || newT == nil || !sameExceptStamp(oldT, newT) {
		return false
	}
	oldStamp, newStamp := oldT.Annotations[stamp.AnnotationHash], newT.Annotations[stamp.AnnotationHash]
	if newStamp != "" && newStamp != oldStamp {
		return false
	}
	if newStamp == "" && oldStamp != "" {
		kind.SetTemplateAnnotation(obj, stamp.AnnotationHash, oldStamp)
	}
	meta := obj.GetAnnotations()
	for _, k := range ourAnnotations {
		if v, ok := old.GetAnnotations()[k]; ok && meta[k] == "" {
			if meta == nil {
				meta = map[string]string{}
			}
			meta[k] = v
		}
	}
	obj.SetAnnotations(meta)
	return true
}

// freshProposal reports whether an UPDATE that changes only the stamp carries a
// consistent proposal (record == stamp) computed from sources no older than
// those recorded with the current stamp, and all of them orderable: then the
// proposal cannot flip the hash back and needs no consistent re-read. A fan-out
// to N workloads so costs N admissions and no reads.
func freshProposal(kind workload.Kind, old, obj client.Object) bool {
	proposed := kind.PodTemplate(obj).Annotations[stamp.AnnotationHash]
	if proposed == "" || obj.GetAnnotations()[stamp.AnnotationAppliedHash] != proposed {
		return false
	}
	oldVersions := old.GetAnnotations()[stamp.AnnotationSourceVersions]
	newVersions, ok := obj.GetAnnotations()[stamp.AnnotationSourceVersions]
	if !ok || (oldVersions != "" && newVersions == oldVersions) {
		// No versions, or the same ones as the current stamp: not a recomputation.
		return false
	}
	stale, uncertain := stamp.CompareVersions(stamp.ParseVersions(oldVersions), stamp.ParseVersions(newVersions))
	return !stale && !uncertain
}

func sameExceptStamp(a, b *corev1.PodTemplateSpec) bool {
	a, b = a.DeepCopy(), b.DeepCopy()
	delete(a.Annotations, stamp.AnnotationHash)
	delete(b.Annotations, stamp.AnnotationHash)
	if len(a.Annotations) == 0 {
		a.Annotations = nil
	}
	if len(b.Annotations) == 0 {
		b.Annotations = nil
	}
	return equality.Semantic.DeepEqual(a, b)
}

// report returns p as an admission warning and, unless dry-run, a Warning event.
func (s *Stamper) report(ctx context.Context, obj client.Object, namespace string, p stamp.Problem, dryRun bool) {
	s.warn(ctx, obj, namespace, workload.ReasonInvalidValue, "Ignore", p.String(), dryRun)
}

// warn returns msg as an admission warning and, unless dry-run, a Warning
// event with reason and action.
func (s *Stamper) warn(ctx context.Context, obj client.Object, namespace, reason, action, msg string, dryRun bool) {
	addWarning(ctx, msg)
	s.event(obj, namespace, corev1.EventTypeWarning, reason, action, msg, dryRun)
}

// event emits an event about obj (in namespace), unless dry-run.
func (s *Stamper) event(obj client.Object, namespace, eventType, reason, action, msg string, dryRun bool) {
	if dryRun || s.Recorder == nil {
		return
	}
	ref := obj.DeepCopyObject().(client.Object)
	if ref.GetNamespace() == "" {
		ref.SetNamespace(namespace)
	}
	s.Recorder.Eventf(ref, nil, eventType, reason, action, "%s", msg)
}

// warnings collects admission warnings through the request context.
type warningsKey struct{}

type warnings struct{ list []string }

func addWarning(ctx context.Context, w string) {
	if ws, ok := ctx.Value(warningsKey{}).(*warnings); ok {
		ws.list = append(ws.list, w)
	}
}

// withWarnings wraps a handler so that warnings added during Handle are returned
// to the client (the typed Defaulter interface has no way to return them).
type withWarnings struct{ admission.Handler }

func (h withWarnings) Handle(ctx context.Context, req admission.Request) admission.Response {
	ws := &warnings{}
	resp := h.Handler.Handle(context.WithValue(ctx, warningsKey{}, ws), req)
	return resp.WithWarnings(ws.list...)
}
