package stamp

import (
	corev1 "k8s.io/api/core/v1"
)

// Via says how a workload references a ConfigMap or Secret.
type Via string

// The ways a workload references an object. ViaSelector is decided by the
// object (its rollout selector), not by the workload; callers that match
// selectors report it with this name.
const (
	ViaVolume    Via = "volume"
	ViaProjected Via = "projected"
	ViaEnvFrom   Via = "envFrom"
	ViaKeyRef    Via = "keyRef"
	ViaExtra     Via = "extra"
	ViaSelector  Via = "rollout-selector"
)

// Reference is one reference of a workload to a ConfigMap or Secret, with how
// it is made. Keys are the referenced keys; nil means every key.
type Reference struct {
	Ref  ObjectRef
	Via  Via
	Keys []string
	// Where names the volume (volume, projected), the container (envFrom,
	// keyRef) or the annotation (extra) that makes the reference.
	Where string
}

// VisitTemplateRefs calls visit for every reference of spec, in the order
// AddTemplateRefs adds them (see there for what counts as a reference).
func VisitTemplateRefs(spec *corev1.PodSpec, visit func(Reference)) {
	if spec == nil {
		return
	}
	items := func(kind Kind, name string, via Via, where string, its []corev1.KeyToPath) {
		if name == "" {
			return
		}
		r := Reference{Ref: ObjectRef{Kind: kind, Name: name}, Via: via, Where: where}
		for _, it := range its {
			r.Keys = append(r.Keys, it.Key)
		}
		visit(r)
	}
	for _, v := range spec.Volumes {
		if cm := v.ConfigMap; cm != nil {
			items(KindConfigMap, cm.Name, ViaVolume, v.Name, cm.Items)
		}
		if s := v.Secret; s != nil {
			items(KindSecret, s.SecretName, ViaVolume, v.Name, s.Items)
		}
		if p := v.Projected; p != nil {
			for _, src := range p.Sources {
				if cm := src.ConfigMap; cm != nil {
					items(KindConfigMap, cm.Name, ViaProjected, v.Name, cm.Items)
				}
				if s := src.Secret; s != nil {
					items(KindSecret, s.Name, ViaProjected, v.Name, s.Items)
				}
			}
		}
	}
	container := func(c *corev1.Container) {
		for _, e := range c.EnvFrom {
			if e.ConfigMapRef != nil && e.ConfigMapRef.Name != "" {
				visit(Reference{Ref: ObjectRef{Kind: KindConfigMap, Name: e.ConfigMapRef.Name}, Via: ViaEnvFrom, Where: c.Name})
			}
			if e.SecretRef != nil && e.SecretRef.Name != "" {
				visit(Reference{Ref: ObjectRef{Kind: KindSecret, Name: e.SecretRef.Name}, Via: ViaEnvFrom, Where: c.Name})
			}
		}
		for _, e := range c.Env {
			vf := e.ValueFrom
			if vf == nil {
				continue
			}
			if k := vf.ConfigMapKeyRef; k != nil && k.Name != "" {
				visit(Reference{Ref: ObjectRef{Kind: KindConfigMap, Name: k.Name}, Via: ViaKeyRef, Keys: []string{k.Key}, Where: c.Name})
			}
			if k := vf.SecretKeyRef; k != nil && k.Name != "" {
				visit(Reference{Ref: ObjectRef{Kind: KindSecret, Name: k.Name}, Via: ViaKeyRef, Keys: []string{k.Key}, Where: c.Name})
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

// WorkloadReferences returns every reference WorkloadRefs counts, one by one
// with how it is made: the template's (VisitTemplateRefs) and the names of the
// extra-configmaps / extra-secrets annotations (ViaExtra, all keys), with the
// same problems as WorkloadRefs. Rollout selectors are not included.
func WorkloadReferences(annotations map[string]string, spec *corev1.PodSpec) ([]Reference, []Problem) {
	var out []Reference
	VisitTemplateRefs(spec, func(r Reference) { out = append(out, r) })
	var problems []Problem
	for _, extra := range extraAnnotations {
		names, ps, _ := extraNames(extra.annotation, extra.kind, annotations[extra.annotation])
		for _, name := range names {
			out = append(out, Reference{Ref: ObjectRef{Kind: extra.kind, Name: name}, Via: ViaExtra, Where: extra.annotation})
		}
		problems = append(problems, ps...)
	}
	return out, problems
}

// Add records r in refs: every key when r.Keys is nil, otherwise those keys.
func (r Reference) Add(refs *Refs) {
	if r.Keys == nil {
		refs.AddAll(r.Ref)
		return
	}
	for _, k := range r.Keys {
		refs.AddKey(r.Ref, k)
	}
}
