// Package stamp is configstamp's pure domain logic, shared by the admission webhook and
// the reconciler: which ConfigMaps and Secrets a pod template references (and which of
// their keys), how the user-facing labels and annotations are read, how referenced data
// is reduced to per-key digests (also for the informer cache), and how the versioned,
// keyed config hash is computed.
//
// Nothing here talks to an API server; every function is deterministic.
package stamp

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Label and annotation names of the contract (see design.md).
const (
	// LabelEnabled opts a workload, or every workload of a namespace, in.
	LabelEnabled = "configstamp.io/enabled"
	// AnnotationHash is the stamp on spec.template.metadata.
	AnnotationHash = "configstamp.io/config-hash"
	// AnnotationAppliedHash on workload metadata records the hash the current pods were
	// made with (or the baseline recorded for an unstamped workload).
	AnnotationAppliedHash = "configstamp.io/applied-hash"
	// AnnotationSources on workload metadata holds per-source short digests (see
	// FormatSources), used to name what changed.
	AnnotationSources = "configstamp.io/sources"
	// AnnotationExtraConfigMaps lists ConfigMaps (comma-separated) that count as
	// referenced although the template does not mount them.
	AnnotationExtraConfigMaps = "configstamp.io/extra-configmaps"
	// AnnotationExtraSecrets is AnnotationExtraConfigMaps for Secrets.
	AnnotationExtraSecrets = "configstamp.io/extra-secrets"
	// AnnotationIgnore on a ConfigMap/Secret keeps it out of every hash.
	AnnotationIgnore = "configstamp.io/ignore"
	// AnnotationRolloutSelector on a ConfigMap/Secret: workloads whose pod-template
	// labels match are treated as referencing it (all keys).
	AnnotationRolloutSelector = "configstamp.io/rollout-selector"
	// AnnotationPodDeleteMatch is the accepted alias of AnnotationRolloutSelector.
	AnnotationPodDeleteMatch = "magalix.com/podDeleteMatch"
	// AnnotationDigested marks a cached object (see DigestConfigMap): its value,
	// DigestedPerKey or DigestedCombined, says what its Data holds instead of values.
	// It exists only in memory: the key is no valid annotation key (a '#' in the name
	// part), so the API server rejects every object carrying it and can never deliver
	// one. An object from the API server with any other annotation, such as
	// "configstamp.io/digested", is digested like every other.
	AnnotationDigested = "configstamp.io/cache#digested"
	// HashVersion prefixes every hash ("v1-...").
	HashVersion = "v1"
)

// Values of AnnotationDigested.
const (
	// DigestedPerKey: Data holds the raw SHA-256 sum of each key's value.
	DigestedPerKey = "sha256"
	// DigestedCombined: the object had more than MaxKeyDigests keys; Data holds
	// one raw SHA-256 sum of all keys and values (combinedSum) under the key "".
	DigestedCombined = "sha256-combined"
)

// Kind is the kind of a referenced object.
type Kind string

// The two kinds that can be referenced.
const (
	KindConfigMap Kind = "ConfigMap"
	KindSecret    Kind = "Secret"
)

// ObjectRef names a ConfigMap or Secret in the workload's namespace.
type ObjectRef struct {
	Kind Kind
	Name string
}

// String returns "Kind/name", e.g. "ConfigMap/app-config".
func (r ObjectRef) String() string { return string(r.Kind) + "/" + r.Name }

// JoinRefs joins refs as "Kind/name, Kind/name".
func JoinRefs(refs []ObjectRef) string {
	names := make([]string, len(refs))
	for i, r := range refs {
		names[i] = r.String()
	}
	return strings.Join(names, ", ")
}

// ParseObjectRef is the inverse of ObjectRef.String. The kind must be ConfigMap or
// Secret and the name non-empty; the name is taken verbatim after the first "/".
func ParseObjectRef(s string) (ObjectRef, error) {
	kind, name, ok := strings.Cut(s, "/")
	if !ok {
		return ObjectRef{}, fmt.Errorf("%q is not of the form Kind/name", s)
	}
	if Kind(kind) != KindConfigMap && Kind(kind) != KindSecret {
		return ObjectRef{}, fmt.Errorf("%q: kind %q is neither ConfigMap nor Secret", s, kind)
	}
	if name == "" {
		return ObjectRef{}, fmt.Errorf("%q: empty name", s)
	}
	return ObjectRef{Kind: Kind(kind), Name: name}, nil
}

func compareRefs(a, b ObjectRef) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Name, b.Name))
}

// KeySet says which keys of an object are referenced: All (every key of data and
// binaryData) or exactly Keys.
type KeySet struct {
	All  bool
	Keys map[string]struct{}
}

// Sorted returns the keys in Keys, sorted (nil when All or empty).
func (k KeySet) Sorted() []string {
	if k.All || len(k.Keys) == 0 {
		return nil
	}
	out := make([]string, 0, len(k.Keys))
	for key := range k.Keys {
		out = append(out, key)
	}
	slices.Sort(out)
	return out
}

// Refs accumulates references of one workload. Merging rules: All wins over single
// keys; single keys are unioned. The zero value is an empty, usable Refs.
type Refs struct {
	m map[ObjectRef]*KeySet
}

// NewRefs returns an empty set of references.
func NewRefs() *Refs { return &Refs{m: map[ObjectRef]*KeySet{}} }

// AddAll records that every key of ref is referenced.
func (r *Refs) AddAll(ref ObjectRef) {
	if r.m == nil {
		r.m = map[ObjectRef]*KeySet{}
	}
	r.m[ref] = &KeySet{All: true}
}

// AddKey records that one key of ref is referenced (a no-op when ref is already
// referenced with All).
func (r *Refs) AddKey(ref ObjectRef, key string) {
	if r.m == nil {
		r.m = map[ObjectRef]*KeySet{}
	}
	ks := r.m[ref]
	if ks == nil {
		ks = &KeySet{Keys: map[string]struct{}{}}
		r.m[ref] = ks
	}
	if !ks.All {
		ks.Keys[key] = struct{}{}
	}
}

// Remove forgets ref entirely (e.g. an object the caller decided to ignore).
func (r *Refs) Remove(ref ObjectRef) { delete(r.m, ref) }

// Len is the number of referenced objects.
func (r *Refs) Len() int {
	if r == nil {
		return 0
	}
	return len(r.m)
}

// Objects returns the referenced objects sorted by Kind, then Name.
func (r *Refs) Objects() []ObjectRef {
	if r == nil {
		return nil
	}
	out := make([]ObjectRef, 0, len(r.m))
	for ref := range r.m {
		out = append(out, ref)
	}
	slices.SortFunc(out, compareRefs)
	return out
}

// Keys returns a copy of the key set of ref (the zero KeySet when ref is not referenced).
func (r *Refs) Keys(ref ObjectRef) KeySet {
	if r == nil || r.m[ref] == nil {
		return KeySet{}
	}
	ks := r.m[ref]
	out := KeySet{All: ks.All}
	if !ks.All {
		out.Keys = make(map[string]struct{}, len(ks.Keys))
		for k := range ks.Keys {
			out.Keys[k] = struct{}{}
		}
	}
	return out
}

// IndexValues returns ObjectRef.String() of every referenced object, sorted and
// unique: the values of the workload field index.
func (r *Refs) IndexValues() []string {
	objs := r.Objects()
	out := make([]string, len(objs))
	for i, o := range objs {
		out[i] = o.String()
	}
	slices.Sort(out) // already ordered by kind then name; sort by the string to be exact
	return out
}

// AddTemplateRefs adds every ConfigMap and Secret that spec references: in containers
// and initContainers env[].valueFrom.configMapKeyRef/secretKeyRef (that key) and
// envFrom[].configMapRef/secretRef (all keys); volumes[].configMap/secret and
// volumes[].projected.sources[].configMap/secret (only the keys listed in items, all
// keys without items). imagePullSecrets, service-account tokens, downwardAPI and
// clusterTrustBundle are not references. Empty names are ignored; a nil spec adds nothing.
func AddTemplateRefs(refs *Refs, spec *corev1.PodSpec) {
	VisitTemplateRefs(spec, func(r Reference) { r.Add(refs) })
}
