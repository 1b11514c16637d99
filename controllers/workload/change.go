package workload

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/stamp"
)

// IndexSources indexes workloads by every ConfigMap and Secret they reference
// (template and extra-* annotations), as stamp.ObjectRef.String() values. A
// changed ConfigMap finds its workloads through this index, never a LIST. It
// lives here, not with the reconciler that registers it, because the
// apply-time warning webhook reads it too.
const IndexSources = "configstamp.io/sources"

// SelectedBy reports whether the rollout selector in a ConfigMap's or Secret's
// annotations matches a workload's pod-template labels.
func SelectedBy(templateLabels, sourceAnnotations map[string]string) bool {
	sel, ok, _ := stamp.RolloutSelector(sourceAnnotations)
	return ok && !sel.Empty() && sel.Matches(labels.Set(templateLabels))
}

// ReferencesTo returns the references a workload (its metadata annotations
// and pod template) makes to ref, when ref carries sourceAnnotations: its
// template and extra-* references, key-precise, and every key when ref's
// rollout selector matches the template (selected).
func ReferencesTo(annotations map[string]string, tmpl *corev1.PodTemplateSpec, ref stamp.ObjectRef, sourceAnnotations map[string]string) (refs *stamp.Refs, selected bool) {
	refs = stamp.NewRefs()
	all, _ := stamp.WorkloadReferences(annotations, pin.SourceSpec(tmpl))
	for _, r := range all {
		if r.Ref == ref {
			r.Add(refs)
		}
	}
	if SelectedBy(tmpl.Labels, sourceAnnotations) {
		refs.AddAll(ref)
		selected = true
	}
	return refs, selected
}

// comparisonKey only compares two contributions within one process; it is no
// installation key, and nothing computed with it leaves the process.
var comparisonKey = []byte("configstamp: change comparison only")

// ChangeRolls reports whether a workload's stamp changes when ref, in
// namespace, changes from before to after, given what the workload referenced
// of it before and after (ReferencesTo with each version's annotations). A
// change to keys neither references rolls nothing. No installation key is
// needed: both sides are hashed with the same key and only compared.
func ChangeRolls(namespace string, ref stamp.ObjectRef, refsBefore, refsAfter *stamp.Refs, before, after stamp.Source) bool {
	h := stamp.NewHasher(comparisonKey)
	before.Ref, after.Ref = ref, ref
	b := h.Compute(namespace, refsBefore, map[stamp.ObjectRef]stamp.Source{ref: before}).Hash
	a := h.Compute(namespace, refsAfter, map[stamp.ObjectRef]stamp.Source{ref: after}).Hash
	return a != b
}

// ChangeContent names the change of ref, in namespace, that a workload
// referencing refs of it rolls when ref becomes src: the per-source digest
// rollout.Causes names a change by (what the workload references of ref,
// key-precise), computed with the comparison key instead of the
// installation key. Two workloads roll the same change exactly when their
// ChangeContent is equal; the value itself is for comparison only.
// "unreferenced" when ref counts for nothing in the workload's hash (an
// ignored source), as rollout.Causes says.
func ChangeContent(namespace string, ref stamp.ObjectRef, refs *stamp.Refs, src stamp.Source) string {
	src.Ref = ref
	if d, ok := stamp.NewHasher(comparisonKey).Compute(namespace, refs, map[stamp.ObjectRef]stamp.Source{ref: src}).Sources[ref]; ok {
		return d
	}
	return "unreferenced"
}

// Handled reports whether configstamp handles a workload before and after one
// ConfigMap or Secret changes: a workload is configstamp's when it is opted
// in, or selected by a rollout selector, this source's (selectedBefore, with
// its annotations before the change; selectedAfter, after) or another
// object's (byOthers). A change rolls a workload only when it is handled on
// both sides and ChangeRolls: one configstamp starts to handle gets a
// baseline, one it stops handling is let go. The webhook's apply-time
// warnings and the plugin's plan both decide with it.
func Handled(optedIn, byOthers, selectedBefore, selectedAfter bool) (before, after bool) {
	return optedIn || byOthers || selectedBefore, optedIn || byOthers || selectedAfter
}
