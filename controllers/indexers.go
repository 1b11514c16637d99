package controllers

import (
	"context"
	"fmt"
	"strings"
	"unique"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// IndexSources indexes workloads by every ConfigMap and Secret they reference
// (workload.IndexSources, which the apply-time warning webhook reads too).
const IndexSources = workload.IndexSources

// IndexHalted is rollout.IndexHalted.
const IndexHalted = rollout.IndexHalted

var indexHalted = rollout.IndexHaltedFunc

// indexWorkloadSources is IndexSources' function for workloads of kind.
func indexWorkloadSources(kind workload.Kind) client.IndexerFunc {
	return func(obj client.Object) []string {
		tmpl := kind.PodTemplate(obj)
		if tmpl == nil {
			return nil
		}
		refs, _ := stamp.WorkloadRefs(obj.GetAnnotations(), pin.SourceSpec(tmpl))
		return refs.IndexValues()
	}
}

// SetupIndexes registers the field indexes on the manager's cache.
func SetupIndexes(ctx context.Context, indexer client.FieldIndexer, kinds *workload.Registry) error {
	for _, kind := range kinds.All() {
		for name, fn := range map[string]client.IndexerFunc{
			IndexSources: indexWorkloadSources(kind), rollout.IndexRolling: rollout.IndexRollingFunc, rollout.IndexPassed: rollout.IndexPassedFunc, IndexHalted: indexHalted, IndexPinned: indexPinned(kind),
		} {
			if err := indexer.IndexField(ctx, kind.New(), name, fn); err != nil {
				return fmt.Errorf("while indexing %s by %s: %w", kind.Name, name, err)
			}
		}
	}
	for _, obj := range []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}} {
		if err := indexer.IndexField(ctx, obj, workload.IndexHasSelector, workload.IndexHasSelectorFunc); err != nil {
			return fmt.Errorf("while indexing %T selectors: %w", obj, err)
		}
	}
	return nil
}

// lastApplied is kubectl's client-side-apply record: a full copy of the object,
// data included, so it never enters the cache.
const lastApplied = "kubectl.kubernetes.io/last-applied-configuration"

// CacheOptions returns the cache settings that keep memory proportional to the
// number of objects rather than their size: ConfigMap and Secret data are
// replaced by per-key digests before an object is stored, and managedFields and
// last-applied copies are dropped from everything.
//
// The cache holds only the namespaces scope may contain (ScopeNamespaces), so
// memory follows the scope too. With pinned (--pin) it also holds the
// revisions of pinned workloads (RevisionOwner), and no other revision. Namespaces themselves are cluster-scoped and
// cached whole: their labels say which workloads opted in and which
// namespaces --namespace-selector selects.
func CacheOptions(kinds *workload.Registry, scope *workload.Scope, pinned bool) ctrlcache.Options {
	// Snapshots (pinned config) are copies, never sources: none is cached.
	notSnapshots := labels.NewSelector().Add(notSnapshot)
	byObject := map[client.Object]ctrlcache.ByObject{
		&corev1.ConfigMap{}: {Label: notSnapshots, Transform: func(in any) (any, error) {
			if cm, ok := in.(*corev1.ConfigMap); ok {
				stamp.DigestConfigMap(cm)
			}
			return in, nil
		}},
		&corev1.Secret{}: {Label: notSnapshots, Transform: func(in any) (any, error) {
			if s, ok := in.(*corev1.Secret); ok {
				stamp.DigestSecret(s)
			}
			return in, nil
		}},
	}
	for _, kind := range kinds.All() { // the extra kinds of --kinds-config too
		byObject[kind.New()] = ctrlcache.ByObject{Transform: stripWorkload(kind)}
	}
	if pinned {
		pinnedRevisions(byObject)
	}
	return ctrlcache.Options{
		DefaultNamespaces: ScopeNamespaces(scope),
		DefaultTransform:  stripMetadata,
		ByObject:          byObject,
	}
}

// notSnapshot selects the objects without the label pin.LabelSnapshot.
var notSnapshot = func() labels.Requirement {
	r, err := labels.NewRequirement(pin.LabelSnapshot, selection.DoesNotExist, nil)
	if err != nil {
		panic(err)
	}
	return *r
}()

// ScopeNamespaces is the cache's DefaultNamespaces for scope: with a watch
// list one informer per watched namespace (list and watch in that namespace
// only, which a Role there allows); without one, one informer over every
// namespace with a field selector that leaves out the excluded ones (their
// objects never reach configstamp). Cluster-scoped objects (Namespaces) are
// not affected. A nil scope caches every namespace.
func ScopeNamespaces(scope *workload.Scope) map[string]ctrlcache.Config {
	if scope == nil {
		return nil
	}
	out := map[string]ctrlcache.Config{}
	if watched := scope.Watched(); len(watched) > 0 {
		for _, ns := range watched {
			out[ns] = ctrlcache.Config{}
		}
		return out
	}
	var not []fields.Selector
	for _, ns := range scope.Excluded() {
		not = append(not, fields.OneTermNotEqualSelector("metadata.namespace", ns))
	}
	out[ctrlcache.AllNamespaces] = ctrlcache.Config{FieldSelector: fields.AndSelectors(not...)}
	return out
}

func stripMetadata(in any) (any, error) {
	if obj, ok := in.(client.Object); ok {
		obj.SetNamespace(unique.Make(obj.GetNamespace()).Value()) // many objects, few namespaces
		obj.SetManagedFields(nil)
		if a := obj.GetAnnotations(); a != nil {
			if _, ok := a[lastApplied]; ok {
				delete(a, lastApplied)
				obj.SetAnnotations(a)
			}
		}
	}
	return in, nil
}

var _ cache.TransformFunc = stripMetadata

// stripWorkload keeps of a workload what configstamp reads: its name, its
// configstamp.io/ labels and annotations, the pod template's labels (matched by
// rollout selectors) and configstamp.io/ annotations (the stamp), its
// references (volumes of ConfigMaps, Secrets and projections; env keyRefs;
// envFrom), and the spec and status fields that tell a rollout's progress.
// Images, commands, resources, probes, selectors, rolling-update parameters (but a StatefulSet's partition), other labels
// and annotations never enter the cache. configstamp patches workloads with
// explicit keys (never a diff of the cached object), and the webhook decodes
// the object it admits and never reads workloads from the cache.
func stripWorkload(kind workload.Kind) cache.TransformFunc {
	return func(in any) (any, error) { return slimWorkload(kind, in) }
}

// slimWorkload is stripWorkload's transform of one object of kind.
func slimWorkload(kind workload.Kind, in any) (any, error) {
	if _, err := stripMetadata(in); err != nil {
		return in, err
	}
	obj, ok := in.(client.Object)
	if !ok {
		return in, nil
	}
	obj.SetLabels(ownKeys(obj.GetLabels()))
	own := ownKeys(obj.GetAnnotations())
	stamp.BoundWorkloadAnnotations(own) // a tenant's 256 KiB of extra-* names: what counts of it
	obj.SetAnnotations(own)
	obj.SetOwnerReferences(nil)
	obj.SetFinalizers(nil)
	tmpl := kind.PodTemplate(obj)
	if tmpl != nil {
		tmpl.Annotations = ownKeys(tmpl.Annotations)
		tmpl.Spec = referencesOnly(&tmpl.Spec)
	}
	kind.Slim(obj, tmpl) // what the kind's status needs (an extra kind: tmpl is a copy, written back)
	return in, nil
}

// ownPrefix is the prefix of every label and annotation configstamp reads on a
// workload (opt-in, extra-*, priority, debounce, its records, the stamp).
const ownPrefix = "configstamp.io/"

// ownKeys returns the configstamp.io/ entries of m, nil when there are none.
func ownKeys(m map[string]string) map[string]string {
	var out map[string]string
	for k, v := range m {
		if strings.HasPrefix(k, ownPrefix) {
			if out == nil {
				out = make(map[string]string, 4)
			}
			out[k] = v
		}
	}
	return out
}

// referencesOnly returns the parts of spec that can reference a ConfigMap or Secret.
func referencesOnly(spec *corev1.PodSpec) corev1.PodSpec {
	var out corev1.PodSpec
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil || v.Secret != nil || v.Projected != nil {
			out.Volumes = append(out.Volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{
				ConfigMap: v.ConfigMap, Secret: v.Secret, Projected: v.Projected}})
		}
	}
	slim := func(cs []corev1.Container) []corev1.Container {
		var kept []corev1.Container
		for _, c := range cs {
			k := corev1.Container{Name: c.Name, EnvFrom: c.EnvFrom}
			for _, e := range c.Env {
				if e.ValueFrom != nil && (e.ValueFrom.ConfigMapKeyRef != nil || e.ValueFrom.SecretKeyRef != nil) {
					k.Env = append(k.Env, corev1.EnvVar{Name: e.Name, ValueFrom: e.ValueFrom})
				}
			}
			kept = append(kept, k)
		}
		return kept
	}
	out.Containers = slim(spec.Containers)
	out.InitContainers = slim(spec.InitContainers)
	return out
}
