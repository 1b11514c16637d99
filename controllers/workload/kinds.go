// Package workload is what configstamp's webhook and reconciler share about the
// workloads they stamp: the kinds and where their pod template sits, how the
// referenced ConfigMaps and Secrets are read and hashed (Resolver), and the
// names both paths use for events. Neither path owns it; the webhook never
// imports the reconciler's package.
package workload

import (
	"reflect"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// Kind describes one kind of workload whose pod template configstamp stamps.
type Kind struct {
	// Name is the Kind, e.g. "Deployment".
	Name string
	// Resource is the plural resource name, e.g. "deployments".
	Resource string
	// ShortName is kubectl's short name of a built-in kind (deploy, sts, ds).
	ShortName string
	New       func() client.Object
	NewList   func() client.ObjectList
	// Items returns the objects of a list made by NewList.
	Items func(client.ObjectList) []client.Object
	// GVK is set for the extra kinds of --kinds-config (read as
	// unstructured); the built-in kinds are typed.
	GVK schema.GroupVersionKind
	// TemplatePath is where the pod template sits (spec.template when empty).
	TemplatePath []string
	// Progress tells an extra kind's rollout progress (see Progress); nil for
	// the built-in kinds, whose progress is typed, and for extra kinds whose
	// rollouts configstamp does not follow.
	Progress *Progress
}

// Unstructured reports whether k is an extra kind (--kinds-config).
func (k Kind) Unstructured() bool { return !k.GVK.Empty() }

// Group is k's API group: apps for the built-in kinds.
func (k Kind) Group() string {
	if k.Unstructured() {
		return k.GVK.Group
	}
	return appsv1.GroupName
}

// Spellings are the ways kubectl accepts k as the KIND of KIND/NAME: the
// kind in lower case, the resource and the short name, each also followed by
// the group (deployment.apps). Compare them without regard to case.
func (k Kind) Spellings() []string {
	names := []string{strings.ToLower(k.Name), k.Resource}
	if k.ShortName != "" {
		names = append(names, k.ShortName)
	}
	out := slices.Clone(names)
	for _, n := range names {
		out = append(out, n+"."+k.Group())
	}
	return out
}

// TemplateFields returns the path of k's pod template.
func (k Kind) TemplateFields() []string {
	if len(k.TemplatePath) == 0 {
		return []string{"spec", "template"}
	}
	return k.TemplatePath
}

// Registry is the kinds configstamp handles, in a stable order: the built-in
// ones, then those of --kinds-config. It is built once at start (NewRegistry)
// and passed to everything that needs the kinds; nothing changes it after.
// A nil Registry holds the built-in kinds only.
type Registry struct{ kinds []Kind }

// NewRegistry returns the built-in kinds followed by extra.
func NewRegistry(extra ...Kind) *Registry {
	return &Registry{kinds: append(slices.Clone(builtins), extra...)}
}

// All returns the kinds, in order (a copy).
func (r *Registry) All() []Kind { return slices.Clone(r.list()) }

func (r *Registry) list() []Kind {
	if r == nil {
		return builtins
	}
	return r.kinds
}

// Of returns the kind of obj: a built-in kind by its Go type, an extra kind
// by its group and kind.
func (r *Registry) Of(obj client.Object) (Kind, bool) {
	u, custom := obj.(*unstructured.Unstructured)
	for _, k := range r.list() {
		switch {
		case custom && k.Unstructured() && k.GVK.GroupKind() == u.GroupVersionKind().GroupKind():
			return k, true
		case !custom && !k.Unstructured() && reflect.TypeOf(k.New()) == reflect.TypeOf(obj):
			return k, true
		}
	}
	return Kind{}, false
}

// builtins are the typed kinds configstamp always handles.
var builtins = []Kind{
	{
		Name: "Deployment", Resource: "deployments", ShortName: "deploy",
		New:     func() client.Object { return &appsv1.Deployment{} },
		NewList: func() client.ObjectList { return &appsv1.DeploymentList{} },
		Items: func(l client.ObjectList) []client.Object {
			return itemPointers(l.(*appsv1.DeploymentList).Items)
		},
	},
	{
		Name: "StatefulSet", Resource: "statefulsets", ShortName: "sts",
		New:     func() client.Object { return &appsv1.StatefulSet{} },
		NewList: func() client.ObjectList { return &appsv1.StatefulSetList{} },
		Items: func(l client.ObjectList) []client.Object {
			return itemPointers(l.(*appsv1.StatefulSetList).Items)
		},
	},
	{
		Name: "DaemonSet", Resource: "daemonsets", ShortName: "ds",
		New:     func() client.Object { return &appsv1.DaemonSet{} },
		NewList: func() client.ObjectList { return &appsv1.DaemonSetList{} },
		Items: func(l client.ObjectList) []client.Object {
			return itemPointers(l.(*appsv1.DaemonSetList).Items)
		},
	},
}

// itemPointers turns a list's items into client.Objects without copying them.
func itemPointers[T any, PT interface {
	*T
	client.Object
}](items []T) []client.Object {
	out := make([]client.Object, len(items))
	for i := range items {
		out[i] = PT(&items[i])
	}
	return out
}

// PodTemplate returns the pod template of obj, a workload of kind k, or nil
// for other objects. For a typed kind it is the object's own; for an extra
// kind a copy, changed only through SetTemplateAnnotation and
// SetTemplateReferences.
func (k Kind) PodTemplate(obj client.Object) *corev1.PodTemplateSpec {
	switch w := obj.(type) {
	case *appsv1.Deployment:
		return &w.Spec.Template
	case *appsv1.StatefulSet:
		return &w.Spec.Template
	case *appsv1.DaemonSet:
		return &w.Spec.Template
	case *unstructured.Unstructured:
		if k.of(w) {
			return customTemplate(k, w)
		}
	}
	return nil
}

// of reports whether u is an object of k, an extra kind.
func (k Kind) of(u *unstructured.Unstructured) bool {
	return k.Unstructured() && k.GVK.GroupKind() == u.GroupVersionKind().GroupKind()
}

// ReasonInvalidValue is the reason of the Warning event that reports a bad
// user value (it is ignored, never fatal).
const ReasonInvalidValue = "InvalidValue"

// IndexHasSelector indexes ConfigMaps and Secrets that carry a rollout selector,
// with the value "true", so a workload finds the selectors that may match it
// without scanning every object of its namespace.
const IndexHasSelector = "configstamp.io/has-selector"

// IndexHasSelectorFunc is the index function of IndexHasSelector.
func IndexHasSelectorFunc(obj client.Object) []string {
	if _, ok, _ := stamp.RolloutSelector(obj.GetAnnotations()); ok {
		return []string{"true"}
	}
	return nil
}
