// Package workload is what configstamp's webhook and reconciler share about the
// workloads they stamp: the kinds, and what differs from one kind to another
// (Behavior: where the pod template sits, how the status tells a rollout's
// progress, what the cache keeps, where the revisions are), how the
// referenced ConfigMaps and Secrets are read and hashed (Resolver), and the
// names both paths use for events. Neither path owns it; the webhook never
// imports the reconciler's package.
//
// Each kind is one file (deployment.go, statefulset.go, daemonset.go, and
// custom.go for the kinds of --kinds-config): its Kind and its Behavior.
// Adding a kind is one file and one registration (builtins, below).
package workload

import (
	"reflect"
	"slices"
	"strings"
	"time"

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
	// behavior is what differs by kind (see Behavior): set by the built-in
	// kinds' definitions and by Custom. nil in the zero Kind.
	behavior Behavior
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

// GroupKind is k's group and kind, as admission requests name it.
func (k Kind) GroupKind() schema.GroupKind { return schema.GroupKind{Group: k.Group(), Kind: k.Name} }

// GVR is where k is read and written: apps/v1 for the built-in kinds.
func (k Kind) GVR() schema.GroupVersionResource {
	if k.Unstructured() {
		return k.GVK.GroupVersion().WithResource(k.Resource)
	}
	return appsv1.SchemeGroupVersion.WithResource(k.Resource)
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

// Named returns the kind called name (Kind.Name, e.g. "Deployment").
func (r *Registry) Named(name string) (Kind, bool) {
	for _, k := range r.list() {
		if k.Name == name {
			return k, true
		}
	}
	return Kind{}, false
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

// builtins are the typed kinds configstamp always handles, each defined, with
// its Behavior, in its own file.
var builtins = []Kind{deploymentKind, statefulSetKind, daemonSetKind}

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
	if k.behavior == nil {
		return nil
	}
	return k.behavior.Template(obj)
}

// Status reads obj, a workload of kind k, as its rollout needs it (see
// Status, and each kind's Behavior). Other objects, and any object of the
// zero Kind, are complete.
func (k Kind) Status(obj client.Object) Status {
	if k.behavior == nil {
		return otherStatus
	}
	return k.behavior.Status(obj)
}

// Slim strips obj, a workload of kind k, in place, to what the cache keeps of
// its spec and status (its metadata and its pod template tmpl, already
// stripped, are the caller's). For an extra kind, whose tmpl is a copy, it
// keeps its metadata as it is, tmpl and the fields its Progress names.
func (k Kind) Slim(obj client.Object, tmpl *corev1.PodTemplateSpec) {
	if k.behavior != nil {
		k.behavior.Slim(obj, tmpl)
	}
}

// Revisions returns an empty list of the type that holds the revisions of
// k's workloads, nil when configstamp reads none (an extra kind).
func (k Kind) Revisions() client.ObjectList {
	if k.behavior == nil {
		return nil
	}
	return k.behavior.Revisions()
}

// RevisionNumber returns the revision number of rev, one item of a
// Revisions list.
func (k Kind) RevisionNumber(rev client.Object) int64 {
	if k.behavior == nil {
		return 0
	}
	return k.behavior.RevisionNumber(rev)
}

// Hold returns what holds obj's rollout at its first new pod, which must
// stay healthy for window (nil: its whole rollout is the canary).
func (k Kind) Hold(obj client.Object, window time.Duration) Hold {
	if k.behavior == nil {
		return nil
	}
	return k.behavior.Hold(obj, window)
}

// Freeze returns what stops obj's rollout where it is (Behavior.Freeze).
func (k Kind) Freeze(obj client.Object) Hold {
	if k.behavior == nil {
		return nil
	}
	return k.behavior.Freeze(obj)
}

// Nodes returns the per-node part of obj's rollout (Behavior.Nodes).
func (k Kind) Nodes(obj client.Object) NodeRollout {
	if k.behavior == nil {
		return nil
	}
	return k.behavior.Nodes(obj)
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
