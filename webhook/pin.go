package webhook

import (
	"context"
	"errors"
	"fmt"
	"maps"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// ReasonHeldByHalt is the Warning event of a user's update of a pinned
// workload that kept its snapshots because the new configuration is a halted
// change (the reconciler's event for a waiting workload has the same reason).
const ReasonHeldByHalt = "RolloutHalted"

// ReasonHeldByCanary is the Warning event of a user's update of a pinned
// workload that kept its snapshots because the new configuration's canary,
// another workload, has not passed yet.
const ReasonHeldByCanary = "WaitingForCanary"

// ReasonPinFailed is the Warning event of a snapshot configstamp could not
// make; configstamp_warnings_total{reason="PinFailed"} counts them.
const ReasonPinFailed = "PinFailed"

// pinRequest is what the pin step of one admission works on.
type pinRequest struct {
	call
	obj  client.Object
	comp *workload.Computation
	memo *pin.Memo
	// current are the snapshots the workload's current template names (an
	// UPDATE's old object): their names are kept for unchanged content even
	// when the request's template names others (an undo, a manifest applied
	// with the source names).
	current pin.Pins
}

// pinStep pins (or unpins) the template of p and returns its stamp; kept
// reports that the snapshots could not be made and the workload was kept as
// it was (pinFailed): nothing more to stamp.
func (s *Stamper) pinStep(ctx context.Context, p pinRequest) (stamped string, kept bool) {
	stamped, err := s.pinned(ctx, p)
	if err != nil {
		s.pinFailed(ctx, p, err)
	}
	p.kind.SetTemplateReferences(p.obj, p.tmpl) // an extra kind's template is a copy
	return stamped, err != nil
}

// ReasonRolledBack is the event of a pinned workload rolled back by a user
// to an earlier revision whose snapshots configstamp keeps.
const ReasonRolledBack = "RolledBackToSnapshots"

// pinned decides the template of a workload that is pinned, or was and is
// being unpinned, and returns the stamp it carries:
//
//   - a user's UPDATE that brings back an earlier revision's template whose
//     snapshots still hold what its stamp says (kubectl rollout undo) is kept
//     as it is, stamp and snapshots: a rollback;
//   - a later UPDATE of a rolled-back workload whose sources did not change
//     since keeps the revision's snapshots and stamp;
//   - anything else is pinned to the sources' current content (pin).
func (s *Stamper) pinned(ctx context.Context, p pinRequest) (string, error) {
	tmpl := p.tmpl
	var old client.Object
	if p.req.Operation == admissionv1.Update && p.wanted {
		if p.oldErr != nil {
			return "", p.oldErr
		}
		old = p.old
	}
	rolledBack, err := s.rollback(ctx, p, old)
	if err != nil {
		return "", err
	}
	if rolledBack {
		keepRolloutRecord(p.obj, old)
		setAnnotation(p.obj, pin.AnnotationRolledBack, p.sent)
		s.event(p.obj, p.req.Namespace, corev1.EventTypeNormal, ReasonRolledBack, "Pin", fmt.Sprintf("rolled back by a user to the revision stamped %s=%s, pinned to %s: configstamp keeps these snapshots and rolls forward when a source changes",
			stamp.AnnotationHash, p.sent, tmpl.Annotations[pin.AnnotationPinned]), p.dryRun)
		return p.sent, nil
	}
	if old != nil {
		oldT := p.kind.PodTemplate(old)
		if pin.RolledBack(old.GetAnnotations(), oldT) && old.GetAnnotations()[stamp.AnnotationAppliedHash] == p.comp.Hash {
			tmpl.Spec = *pin.SourceSpec(tmpl)
			pin.Apply(tmpl, pin.Pinned(oldT))
			setAnnotation(p.obj, pin.AnnotationRolledBack, oldT.Annotations[stamp.AnnotationHash])
			return oldT.Annotations[stamp.AnnotationHash], nil
		}
	}
	if err := s.halted(ctx, p, old); err != nil {
		return "", err
	}
	setAnnotation(p.obj, pin.AnnotationRolledBack, "")
	tmpl.Spec = *pin.SourceSpec(tmpl)
	if old != nil {
		p.current = pin.Pinned(p.kind.PodTemplate(old))
	}
	if err := s.pin(ctx, p); err != nil {
		return "", err
	}
	return s.stampFor(p, old), nil
}

// stampFor is the stamp of a template just pinned (pin): old's stamp when old
// was pinned to the same snapshots and its stamp hashes the same data under a
// key this installation replaced, so that a key rotation never rolls a pinned
// workload by itself (not at a re-apply either); else the hash computed now.
func (s *Stamper) stampFor(p pinRequest, old client.Object) string {
	if old == nil {
		return p.comp.Hash
	}
	oldT := p.kind.PodTemplate(old)
	if oldT == nil {
		return p.comp.Hash
	}
	was := oldT.Annotations[stamp.AnnotationHash]
	if was == "" || was == p.comp.Hash || !maps.Equal(pin.Pinned(oldT), pin.Pinned(p.tmpl)) ||
		!p.comp.HashedAs(s.Resolver.Keys, p.req.Namespace, was) {
		return p.comp.Hash
	}
	return was
}

// heldByHalt is pinned's error for a user's update of a pinned workload that
// would take a halted change, or one whose canary still runs (canary).
type heldByHalt struct {
	change string
	canary bool
}

func (e *heldByHalt) Error() string {
	if e.canary {
		return fmt.Sprintf("the change %s is being tried on another workload, its canary: this update keeps the current snapshots and stamp, "+
			"and configstamp rolls the new configuration once the canary passed", e.change)
	}
	return fmt.Sprintf("the change %s failed on another workload and is halted: this update keeps the current snapshots and stamp, "+
		"and configstamp rolls the new configuration when the halt lifts", e.change)
}

// reason is the event reason of e.
func (e *heldByHalt) reason() string {
	if e.canary {
		return ReasonHeldByCanary
	}
	return ReasonHeldByHalt
}

// halted returns a heldByHalt when p, a user's update of an already pinned
// workload, would take a change that is halted in its namespace, or whose
// canary (another workload) has not passed yet: the new configuration then
// comes only through the wave, as the reconciler's rollout, so that an
// untried or halted change reaches no pinned workload, not even with its
// own update (an image bump, a `kubectl rollout restart`). The update
// itself is admitted.
func (s *Stamper) halted(ctx context.Context, p pinRequest, old client.Object) error {
	if old == nil || s.Halts == nil || p.req.UserInfo.Username == s.Self || pin.Pinned(p.kind.PodTemplate(old)) == nil {
		return nil
	}
	causes := rollout.Causes(old.GetAnnotations(), p.comp.Sources)
	halt, err := s.Halts.By(ctx, p.req.Namespace, causes)
	if err != nil {
		return err
	}
	if halt != "" {
		return &heldByHalt{change: halt}
	}
	self := rollout.Key{Kind: p.kind.Name, Namespace: p.req.Namespace, Name: old.GetName()}
	canary, err := s.Halts.Canary(ctx, p.req.Namespace, self, causes)
	if err != nil || canary == "" {
		return err
	}
	return &heldByHalt{change: canary, canary: true}
}

// rollback reports whether p is a user's UPDATE that brings back an earlier
// revision's pinned template: a stamp other than old's, and snapshots that
// exist, are configstamp's and hash to that stamp (with the current key or
// one it replaced: an undo across a key rotation).
func (s *Stamper) rollback(ctx context.Context, p pinRequest, old client.Object) (bool, error) {
	if old == nil {
		return false, nil
	}
	tmpl, oldT := p.tmpl, p.kind.PodTemplate(old)
	pins := pin.Pinned(tmpl)
	undoTo, undoing := p.obj.GetAnnotations()[pin.AnnotationUndoTo]
	setAnnotation(p.obj, pin.AnnotationUndoTo, "") // never stored
	self := p.req.UserInfo.Username == s.Self
	if self && (!undoing || undoTo != p.sent) {
		return false, nil // configstamp's own stamp, not its undo
	}
	if p.sent == "" || oldT == nil || p.sent == oldT.Annotations[stamp.AnnotationHash] || len(pins) == 0 {
		return false, nil
	}
	then, err := s.Resolver.ComputeFrom(ctx, pin.Redirect{Reader: s.Resolver.Sources, Pins: pins}, p.req.Namespace, p.obj.GetAnnotations(), tmpl)
	ok := err == nil && then.HashedAs(s.Resolver.Keys, p.req.Namespace, p.sent)
	if self && !ok {
		// configstamp's undo must bring the old config back or change nothing:
		// pinned to the current sources it would run the failed data.
		if err != nil {
			return false, fmt.Errorf("the undo to %s=%s: reading its snapshots: %w", stamp.AnnotationHash, p.sent, err)
		}
		return false, fmt.Errorf("the undo to %s=%s: its snapshots do not hold what its stamp says", stamp.AnnotationHash, p.sent)
	}
	return ok, nil
}

// setAnnotation sets (or, for "", removes) a metadata annotation of obj.
func setAnnotation(obj client.Object, key, value string) {
	meta := obj.GetAnnotations()
	if value == "" {
		if _, ok := meta[key]; ok {
			delete(meta, key)
			obj.SetAnnotations(meta)
		}
		return
	}
	if meta == nil {
		meta = map[string]string{}
	}
	meta[key] = value
	obj.SetAnnotations(meta)
}

// pin makes the template of p.obj, whose spec is already its source view,
// reference snapshots of every pinnable source it mounts or reads (p.wanted),
// or its sources again (unpinned). Each new snapshot exists before the
// template names it; under dry-run none is created and the names are those a
// real request would give.
func (s *Stamper) pin(ctx context.Context, p pinRequest) error {
	tmpl := p.tmpl
	pins := pin.Pins{}
	if p.wanted {
		had := pin.Pinned(tmpl)
		owner := ownerOf(p.obj, p.req)
		for _, ref := range pinnable(tmpl, p.comp, p.memo) {
			src := p.memo.Object(ref)
			name := snapshotName(s.Resolver.Keys, src, had[ref], p.current[ref])
			if !p.dryRun {
				if err := s.Snapshots.Ensure(ctx, pin.Snapshot(src, name), owners(owner)...); err != nil {
					return fmt.Errorf("while making the snapshot %s of %s: %w", name, ref, err)
				}
			}
			pins[ref] = name
		}
		if owner != nil {
			for ref, name := range had {
				if pins[ref] == name || p.dryRun {
					continue
				}
				// The snapshot the template leaves: its old revision still uses it.
				if err := s.Snapshots.Own(ctx, ref.Kind, p.obj.GetNamespace(), name, owner); err != nil {
					return fmt.Errorf("while adding the owner of the snapshot %s of %s: %w", name, ref, err)
				}
			}
		}
	}
	pin.Apply(tmpl, pins)
	return nil
}

// pinnable lists the sources of tmpl (a source view) that get a snapshot: the
// template's own references (not extra-* or rollout selectors, which nothing
// mounts) to objects that exist, are not ignored, and can be copied.
func pinnable(tmpl *corev1.PodTemplateSpec, comp *workload.Computation, memo *pin.Memo) []stamp.ObjectRef {
	refs := stamp.NewRefs()
	stamp.AddTemplateRefs(refs, &tmpl.Spec)
	var out []stamp.ObjectRef
	for _, ref := range refs.Objects() {
		src := memo.Object(ref)
		if data := comp.Data[ref]; src != nil && data.Present && !data.Ignored && pin.Pinnable(src) {
			out = append(out, ref)
		}
	}
	return out
}

// snapshotName is the name of src's snapshot: the first of had (the
// request's template's name, the current template's) that one of the keys
// configstamp knows gives src's content (the content did not change, only the
// key: no rollout), else a new one under the current key.
func snapshotName(keys *stamp.Keyring, src client.Object, had ...string) string {
	hashers := keys.Hashers()
	for _, name := range had {
		for _, h := range hashers {
			if name != "" && pin.Names(h, src, name) {
				return name
			}
		}
	}
	return pin.Name(hashers[0], src)
}

// ownerOf is the owner reference a snapshot gets from the workload, or nil at
// CREATE, when the workload has no UID yet.
func ownerOf(obj client.Object, req admission.Request) *metav1.OwnerReference {
	if obj.GetUID() == "" {
		return nil
	}
	return &metav1.OwnerReference{APIVersion: req.Kind.Group + "/" + req.Kind.Version, Kind: req.Kind.Kind,
		Name: obj.GetName(), UID: obj.GetUID()}
}

// owners is owner as Ensure's owners: none when nil.
func owners(owner *metav1.OwnerReference) []metav1.OwnerReference {
	if owner == nil {
		return nil
	}
	return []metav1.OwnerReference{*owner}
}

// keptOnPinFailure are the workload metadata annotations an UPDATE whose
// snapshot failed keeps as they were: the data record and the rollout record,
// so that the reconciler's patch changes nothing and is retried.
var keptOnPinFailure = append(append([]string{}, ourAnnotations...), rollout.RecordAnnotations...)

// keepPins undoes what an admission would change of configstamp's state when
// a snapshot could not be made: at UPDATE the template keeps its stamp and
// the snapshots it had (sources it had none for stay as written) and the
// workload its records; at CREATE the template stays unpinned, with its stamp.
func keepPins(c call, obj client.Object) error {
	tmpl := c.tmpl
	if c.req.Operation != admissionv1.Update {
		pin.Apply(tmpl, nil)
		return nil
	}
	if c.oldErr != nil {
		return c.oldErr
	}
	oldT := c.kind.PodTemplate(c.old)
	pin.Apply(tmpl, pin.Pinned(oldT))
	if tmpl.Annotations == nil {
		tmpl.Annotations = map[string]string{}
	}
	setOrDelete(tmpl.Annotations, stamp.AnnotationHash, oldT.Annotations)
	meta := obj.GetAnnotations()
	if meta == nil {
		meta = map[string]string{}
	}
	for _, k := range keptOnPinFailure {
		setOrDelete(meta, k, c.old.GetAnnotations())
	}
	obj.SetAnnotations(meta)
	return nil
}

func setOrDelete(m map[string]string, k string, from map[string]string) {
	if v, ok := from[k]; ok {
		m[k] = v
	} else {
		delete(m, k)
	}
}

// pinWanted reports whether obj is to be pinned (pin.Wanted, with its
// namespace's setting); bad values and a pin asked of an installation without
// --pin are reported.
func (s *Stamper) pinWanted(ctx context.Context, obj client.Object, ns *corev1.Namespace, namespace string, dryRun bool) bool {
	wanted, problems := pin.Wanted(obj.GetAnnotations(), ns.Annotations)
	for _, p := range problems {
		s.report(ctx, obj, namespace, p, dryRun)
	}
	if wanted && s.Snapshots == nil {
		s.report(ctx, obj, namespace, stamp.Problem{Field: "annotation " + pin.AnnotationPin, Value: "true",
			Message: "this configstamp installation does not pin (it runs without --pin): the workload reads its ConfigMaps and Secrets directly"}, dryRun)
		return false
	}
	return wanted
}

// pinFailed admits obj keeping configstamp's state as it was (keepPins), and
// says why where the user looks: an admission warning and a Warning event.
// The reconciler retries a rollout the snapshot held back.
func (s *Stamper) pinFailed(ctx context.Context, p pinRequest, err error) {
	if kerr := keepPins(p.call, p.obj); kerr != nil {
		p.logger.Error(kerr, "while decoding the old object; admitting unchanged")
	}
	if held := (*heldByHalt)(nil); errors.As(err, &held) {
		s.warn(ctx, p.obj, p.req.Namespace, held.reason(), "Pin", err.Error(), p.dryRun)
		return
	}
	p.logger.Error(err, "while pinning; keeping the workload on its current snapshots")
	msg := fmt.Sprintf("not pinned to the new configuration: %v; the workload keeps its current snapshots and configstamp retries "+
		"(free a ConfigMap/Secret quota, or rename the object that holds the snapshot's name)", err)
	s.warn(ctx, p.obj, p.req.Namespace, ReasonPinFailed, "Pin", msg, p.dryRun)
}
