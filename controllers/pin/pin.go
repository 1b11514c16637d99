// Package pin is pinned config: a pinned workload's pod template references
// immutable snapshots of its ConfigMaps and Secrets instead of the objects
// themselves, so the files the kubelet mounts change only when configstamp
// rolls the workload (see docs/pinning.md).
//
// This file is the pure part: names, the template rewrite and its inverse (the
// source view every hash and index is computed on). snapshot.go creates the
// snapshots.
package pin

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// Annotations and labels of pinned config.
const (
	// AnnotationPin (user) on a workload, or on a Namespace for every opted-in
	// workload in it: "true" pins, "false" on the workload opts out.
	AnnotationPin = "configstamp.io/pin"
	// AnnotationPinned on the pod template's metadata is configstamp's: what it
	// pinned, "Kind/snapshot=source,..." sorted. It travels with the template
	// into every revision, so a rolled-back template still says which sources
	// its snapshots copy.
	AnnotationPinned = "configstamp.io/pinned"
	// LabelPinned is "true" on a pinned pod template's labels, and so on its
	// revisions' (ReplicaSets, ControllerRevisions copy the template's labels):
	// configstamp caches and follows only those revisions.
	LabelPinned = "configstamp.io/pinned"
	// LabelSnapshot is "true" on every snapshot.
	LabelSnapshot = "configstamp.io/snapshot"
	// SnapshotOf names a snapshot's source: always as an annotation, and as a
	// label too when the name fits a label value.
	SnapshotOf = "configstamp.io/snapshot-of"
	// LabelManagedBy is the recommended label naming the manager.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// Manager is LabelManagedBy's value on snapshots.
	Manager = "configstamp"
)

// domainSnapshot separates snapshot ids from every other keyed value.
const domainSnapshot = "configstamp.io/snapshot"

// idLength is the hex length of the keyed content id in a snapshot's name.
const idLength = 10

// Wanted reports whether a workload is pinned, from its annotations and its
// Namespace's (the workload's valid value wins). Bad values are problems.
func Wanted(workloadAnnotations, namespaceAnnotations map[string]string) (bool, []stamp.Problem) {
	return stamp.Setting("annotation", AnnotationPin, workloadAnnotations, namespaceAnnotations)
}

// Name is the name of the snapshot of src (a ConfigMap or Secret as read from
// the API server): the source's name, cut so that the whole stays a valid
// name of at most 253 characters, then "-" and a content id keyed with h over
// the namespace, the kind, the name, every key and value and, for a Secret,
// its type. The id reveals nothing of the data to whoever cannot compute the
// key's MACs, and differs between namespaces for the same data: a user who
// can read pinned templates in a namespace they cannot write cannot test a
// guess of a Secret there by pinning the guess in their own and comparing
// the names.
func Name(h *stamp.Hasher, src client.Object) string {
	return name(h, src, src.GetNamespace())
}

// Names reports whether snapshot is src's snapshot name under h: Name's, or
// the name releases before the namespace entered it gave (no namespace), so
// that their snapshots stay valid and no pinned workload rolls by the
// upgrade alone.
func Names(h *stamp.Hasher, src client.Object, snapshot string) bool {
	return snapshot == Name(h, src) || snapshot == name(h, src, "")
}

// name is Name with namespace ("": the former name, without it).
func name(h *stamp.Hasher, src client.Object, namespace string) string {
	ref, source, typ := describe(src)
	parts := []string{string(ref.Kind), ref.Name, h.ContentID(source), typ}
	if namespace != "" {
		parts = append([]string{"namespace=" + namespace}, parts...)
	}
	id := h.Seal(domainSnapshot, parts...)[:idLength]
	prefix := ref.Name
	if maxPrefix := validation.DNS1123SubdomainMaxLength - idLength - 1; len(prefix) > maxPrefix {
		prefix = prefix[:maxPrefix]
	}
	prefix = strings.TrimRight(prefix, ".-")
	return prefix + "-" + id
}

// describe returns src's reference, hashable content and (Secret) type.
func describe(src client.Object) (stamp.ObjectRef, stamp.Source, string) {
	switch o := src.(type) {
	case *corev1.ConfigMap:
		s := stamp.SourceFromConfigMap(o)
		return s.Ref, s, ""
	case *corev1.Secret:
		s := stamp.SourceFromSecret(o)
		return s.Ref, s, string(o.Type)
	}
	return stamp.ObjectRef{}, stamp.Source{}, ""
}

// Pinnable reports whether src can be pinned: a ConfigMap, or a Secret of any
// type but a service-account token (the token controller owns those).
func Pinnable(src client.Object) bool {
	switch o := src.(type) {
	case *corev1.ConfigMap:
		return true
	case *corev1.Secret:
		return o.Type != corev1.SecretTypeServiceAccountToken
	}
	return false
}

// Pins maps a source to the snapshot its references point at.
type Pins map[stamp.ObjectRef]string

// Pinned returns what configstamp pinned in tmpl (AnnotationPinned), as
// source -> snapshot. Malformed items are skipped: the annotation is
// configstamp's, and a hand-edited one only misleads its own workload.
func Pinned(tmpl *corev1.PodTemplateSpec) Pins {
	v := tmpl.Annotations[AnnotationPinned]
	if v == "" {
		return nil
	}
	out := Pins{}
	for item := range strings.SplitSeq(v, ",") {
		snap, source, ok := strings.Cut(item, "=")
		ref, err := stamp.ParseObjectRef(snap)
		if !ok || err != nil || source == "" || len(out) >= stamp.MaxReferences {
			continue
		}
		out[stamp.ObjectRef{Kind: ref.Kind, Name: source}] = ref.Name
	}
	return out
}

// format is p as AnnotationPinned.
func (p Pins) format() string {
	items := make([]string, 0, len(p))
	for src, snap := range p {
		items = append(items, string(src.Kind)+"/"+snap+"="+src.Name)
	}
	slices.Sort(items)
	return strings.Join(items, ",")
}

// SourceSpec returns the pod spec of tmpl as its author wrote it: every
// reference to a snapshot configstamp pinned replaced by its source. Hashes,
// indexes and tools all read references through it, so a pinned workload
// counts as referencing its sources. An unpinned template's own spec is
// returned as it is (no copy).
func SourceSpec(tmpl *corev1.PodTemplateSpec) *corev1.PodSpec {
	pins := Pinned(tmpl)
	if len(pins) == 0 {
		return &tmpl.Spec
	}
	sources := make(map[stamp.ObjectRef]string, len(pins))
	for src, snap := range pins {
		sources[stamp.ObjectRef{Kind: src.Kind, Name: snap}] = src.Name
	}
	spec := tmpl.Spec.DeepCopy()
	rename(spec, func(kind stamp.Kind, name string) string {
		if src, ok := sources[stamp.ObjectRef{Kind: kind, Name: name}]; ok {
			return src
		}
		return name
	})
	return spec
}

// Apply rewrites tmpl, whose spec must be a source view (SourceSpec), to
// reference the snapshots of pins and records them in AnnotationPinned
// (removed when pins is empty: an unpinned template).
func Apply(tmpl *corev1.PodTemplateSpec, pins Pins) {
	rename(&tmpl.Spec, func(kind stamp.Kind, name string) string {
		if snap, ok := pins[stamp.ObjectRef{Kind: kind, Name: name}]; ok {
			return snap
		}
		return name
	})
	if len(pins) == 0 {
		delete(tmpl.Annotations, AnnotationPinned)
		delete(tmpl.Labels, LabelPinned)
		return
	}
	if tmpl.Annotations == nil {
		tmpl.Annotations = map[string]string{}
	}
	tmpl.Annotations[AnnotationPinned] = pins.format()
	if tmpl.Labels == nil {
		tmpl.Labels = map[string]string{}
	}
	tmpl.Labels[LabelPinned] = "true"
}

// rename sets every ConfigMap and Secret name spec mounts or reads (the
// references stamp.VisitTemplateRefs visits) to to(kind, name).
func rename(spec *corev1.PodSpec, to func(stamp.Kind, string) string) {
	set := func(kind stamp.Kind, name *string) {
		if *name != "" {
			*name = to(kind, *name)
		}
	}
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		if v.ConfigMap != nil {
			set(stamp.KindConfigMap, &v.ConfigMap.Name)
		}
		if v.Secret != nil {
			set(stamp.KindSecret, &v.Secret.SecretName)
		}
		if v.Projected != nil {
			for j := range v.Projected.Sources {
				if cm := v.Projected.Sources[j].ConfigMap; cm != nil {
					set(stamp.KindConfigMap, &cm.Name)
				}
				if s := v.Projected.Sources[j].Secret; s != nil {
					set(stamp.KindSecret, &s.Name)
				}
			}
		}
	}
	container := func(c *corev1.Container) {
		for j := range c.EnvFrom {
			if r := c.EnvFrom[j].ConfigMapRef; r != nil {
				set(stamp.KindConfigMap, &r.Name)
			}
			if r := c.EnvFrom[j].SecretRef; r != nil {
				set(stamp.KindSecret, &r.Name)
			}
		}
		for j := range c.Env {
			if vf := c.Env[j].ValueFrom; vf != nil {
				if r := vf.ConfigMapKeyRef; r != nil {
					set(stamp.KindConfigMap, &r.Name)
				}
				if r := vf.SecretKeyRef; r != nil {
					set(stamp.KindSecret, &r.Name)
				}
			}
		}
	}
	for i := range spec.InitContainers {
		container(&spec.InitContainers[i])
	}
	for i := range spec.Containers {
		container(&spec.Containers[i])
	}
}

// AnnotationRolledBack on a workload's metadata is configstamp's: the stamp
// of the earlier revision a user rolled the pinned workload back to (kubectl
// rollout undo). While the template carries that stamp, configstamp keeps the
// revision's snapshots, does not count the workload as recovered from a failed
// rollout, and rolls it forward only when a source changes.
const AnnotationRolledBack = "configstamp.io/rolled-back-to"

// AnnotationUndoTo rides on configstamp's own undo of a failed pinned
// workload (configstamp.io/on-failure: undo): the stamp of the revision it
// returns the template to. The webhook treats configstamp's own UPDATE as a
// rollback only with it (any other write of configstamp's is a stamp), and
// removes it from the stored object.
const AnnotationUndoTo = "configstamp.io/undo-to"

// RolledBack reports whether a workload with these metadata annotations and
// pod template runs an earlier revision a user rolled back to.
func RolledBack(annotations map[string]string, tmpl *corev1.PodTemplateSpec) bool {
	v := annotations[AnnotationRolledBack]
	return v != "" && tmpl != nil && v == tmpl.Annotations[stamp.AnnotationHash]
}
