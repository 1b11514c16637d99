package rollout

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// IndexHalted indexes workloads by every source of a change whose rollout
// failed on them (AnnotationHalted of a record that carries a seal), as
// stamp.ObjectRef.String() values. The seal is verified where the index is
// read (Halts), with the keys known then.
const IndexHalted = "configstamp.io/halted"

// IndexHaltedFunc is the IndexHalted indexer.
func IndexHaltedFunc(obj client.Object) []string {
	a := obj.GetAnnotations()
	if _, sealed := a[AnnotationSeal]; !sealed {
		return nil
	}
	var out []string
	for _, c := range ParseChanges(a[AnnotationHalted]) {
		if !slices.Contains(out, c.Ref.String()) {
			out = append(out, c.Ref.String())
		}
	}
	return out
}

// Causes names the changes behind a rollout of a workload with these metadata
// annotations, whose sources hash to sources now (the keyed digests of
// workload.Computation.Sources): each referenced source whose
// short digest differs from the record, with its keyed, key-precise digest of
// what the workload references (so an edit of a key it does not reference
// leaves its changes, and a halt of them, as they are).
func Causes(annotations map[string]string, sources map[stamp.ObjectRef]string) []Change {
	changed := stamp.Changed(stamp.ParseSources(annotations[stamp.AnnotationSources]), sources)
	out := make([]Change, 0, len(changed))
	for _, ref := range changed {
		content := "unreferenced"
		if d, ok := sources[ref]; ok {
			content = d
		}
		out = append(out, Change{Ref: ref, Content: content})
	}
	return out
}

// Halts finds the halts in force, for the reconciler's gate and for the
// webhook (a pinned workload's own update never takes a halted change).
type Halts struct {
	// Reader lists workloads by IndexHalted (the manager's cache).
	Reader client.Reader
	// Resolver recomputes a halting workload's data.
	Resolver *workload.Resolver
	// Kinds are the kinds of workloads that may halt.
	Kinds *workload.Registry
	// Rings: a halt in ring 0 holds the rings above (nil: no rings).
	Rings *Rings
}

// By returns the halted change that holds one of causes, or "". A workload H
// of the namespace whose sealed record halts a change of source R
// (IndexHalted) holds every rollout that changes R for as long as what H
// references of R is still the content that failed on it, computed with the
// key the halt was sealed with: an edit of keys H does not reference, or a new
// installation key, lifts nothing; a fix of what H references does. In a
// namespace of a ring above 0, such an H of a ring-0 namespace holds it too,
// whatever the namespace's own R holds (see Rings).
func (h *Halts) By(ctx context.Context, namespace string, causes []Change) (string, error) {
	refs := refsOf(causes)
	halt, err := h.where(ctx, refs, []client.ListOption{client.InNamespace(namespace)}, func(string) bool { return true })
	if ring, ok := h.Rings.Of(ctx, namespace); halt != "" || err != nil || !ok || ring == 0 {
		return halt, err
	}
	return h.Where(ctx, refs, h.Rings.below(ctx, 1))
}

// Where returns a halted change of one of refs in force in a namespace
// where says, or "".
func (h *Halts) Where(ctx context.Context, refs []stamp.ObjectRef, where func(namespace string) bool) (string, error) {
	return h.where(ctx, refs, nil, where)
}

// where is Where among the workloads listed with opts.
func (h *Halts) where(ctx context.Context, refs []stamp.ObjectRef, opts []client.ListOption, where func(namespace string) bool) (string, error) {
	for _, ref := range refs {
		for _, kind := range h.Kinds.All() {
			list := kind.NewList()
			if err := h.Reader.List(ctx, list, append(opts, client.MatchingFields{IndexHalted: ref.String()}, client.UnsafeDisableDeepCopy)...); err != nil {
				return "", fmt.Errorf("while looking up halted changes: %w", err)
			}
			for _, w := range kind.Items(list) {
				if !where(w.GetNamespace()) {
					continue
				}
				halt, err := h.inForce(ctx, kind, w, ref)
				if err != nil || halt != "" {
					return halt, err
				}
			}
		}
	}
	return "", nil
}

// inForce returns w's halted change of ref if what w references of ref is
// still the content that failed, else "".
func (h *Halts) inForce(ctx context.Context, kind workload.Kind, w client.Object, ref stamp.ObjectRef) (string, error) {
	rec, err := Unseal(w, h.Resolver.Keys)
	key := rec.Key()
	tmpl := kind.PodTemplate(w)
	if err != nil || key == nil || tmpl == nil {
		return "", nil
	}
	for _, c := range ParseChanges(rec.Halted) {
		if c.Ref != ref {
			continue
		}
		comp, err := h.Resolver.Compute(ctx, w.GetNamespace(), w.GetAnnotations(), tmpl)
		if tooMany := (*workload.TooManyReferences)(nil); errors.As(err, &tooMany) {
			return c.String(), nil // cannot tell whether it was fixed: it holds until resumed
		}
		if err != nil {
			return "", err
		}
		if key.Compute(w.GetNamespace(), comp.Refs, comp.Data).Sources[ref] == c.Content {
			return c.String(), nil
		}
	}
	return "", nil
}

// Canary returns the change of a canary that one of causes waits for, or
// "": a workload of namespace other than self whose sealed record is open
// and its change's canary, still running, and that changes a source of
// causes. No other workload of the namespace gets a change of that source
// before it passed (the reconciler's gate, canaryAhead); the webhook holds
// a pinned workload's own update to it too.
func (h *Halts) Canary(ctx context.Context, namespace string, self Key, causes []Change) (string, error) {
	refs := refsOf(causes)
	if len(refs) == 0 {
		return "", nil
	}
	for _, kind := range h.Kinds.All() {
		list := kind.NewList()
		if err := h.Reader.List(ctx, list, client.InNamespace(namespace),
			client.MatchingFields{IndexRolling: "true"}, client.UnsafeDisableDeepCopy); err != nil {
			return "", fmt.Errorf("while looking up running canaries: %w", err)
		}
		for _, w := range kind.Items(list) {
			if kind.Name == self.Kind && w.GetName() == self.Name {
				continue
			}
			rec, err := Unseal(w, h.Resolver.Keys)
			if err != nil || !rec.Open() || rec.Canary != CanaryRunning {
				continue
			}
			for _, c := range ParseChanges(rec.Cause) {
				if slices.Contains(refs, c.Ref) {
					return c.String(), nil
				}
			}
		}
	}
	return "", nil
}
