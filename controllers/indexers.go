package controllers

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"
	ctrlcache "sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// IndexSources indexes workloads by every ConfigMap and Secret they reference
// (template and extra-* annotations), as stamp.ObjectRef.String() values. A
// changed ConfigMap finds its workloads through this index, never a LIST.
const IndexSources = "configstamp.io/sources"

// IndexHasSelector indexes ConfigMaps and Secrets that carry a rollout selector,
// with the value "true", so a workload finds the selectors that may match it
// without scanning every object of its namespace.
const IndexHasSelector = "configstamp.io/has-selector"

// IndexRolling indexes workloads holding a rollout slot (AnnotationRolloutStarted), value "true".
const IndexRolling = "configstamp.io/rolling"

// IndexHalted indexes workloads by every change whose rollout failed on them
// (AnnotationHalted), as stamp.Change.String() values.
const IndexHalted = "configstamp.io/halted"

func indexRolling(obj client.Object) []string {
	if _, ok := obj.GetAnnotations()[stamp.AnnotationRolloutStarted]; ok {
		return []string{"true"}
	}
	return nil
}

func indexHalted(obj client.Object) []string {
	changes := stamp.ParseChanges(obj.GetAnnotations()[stamp.AnnotationHalted])
	out := make([]string, len(changes))
	for i, c := range changes {
		out[i] = c.String()
	}
	return out
}

func indexWorkloadSources(obj client.Object) []string {
	tmpl := PodTemplate(obj)
	if tmpl == nil {
		return nil
	}
	refs, _ := stamp.WorkloadRefs(obj.GetAnnotations(), &tmpl.Spec)
	return refs.IndexValues()
}

func indexHasSelector(obj client.Object) []string {
	if _, ok, _ := stamp.RolloutSelector(obj.GetAnnotations()); ok {
		return []string{"true"}
	}
	return nil
}

// SetupIndexes registers the field indexes on the manager's cache.
func SetupIndexes(ctx context.Context, indexer client.FieldIndexer) error {
	for _, kind := range Workloads {
		for name, fn := range map[string]client.IndexerFunc{
			IndexSources: indexWorkloadSources, IndexRolling: indexRolling, IndexHalted: indexHalted,
		} {
			if err := indexer.IndexField(ctx, kind.New(), name, fn); err != nil {
				return fmt.Errorf("while indexing %s by %s: %w", kind.Name, name, err)
			}
		}
	}
	for _, obj := range []client.Object{&corev1.ConfigMap{}, &corev1.Secret{}} {
		if err := indexer.IndexField(ctx, obj, IndexHasSelector, indexHasSelector); err != nil {
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
func CacheOptions() ctrlcache.Options {
	return ctrlcache.Options{
		DefaultTransform: stripMetadata,
		ByObject: map[client.Object]ctrlcache.ByObject{
			&corev1.ConfigMap{}: {Transform: func(in any) (any, error) {
				if cm, ok := in.(*corev1.ConfigMap); ok {
					stamp.DigestConfigMap(cm)
				}
				return in, nil
			}},
			&corev1.Secret{}: {Transform: func(in any) (any, error) {
				if s, ok := in.(*corev1.Secret); ok {
					stamp.DigestSecret(s)
				}
				return in, nil
			}},
		},
	}
}

func stripMetadata(in any) (any, error) {
	if obj, ok := in.(client.Object); ok {
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
