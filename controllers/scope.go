package controllers

import (
	"context"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	"github.com/configstamp/configstamp/controllers/workload"
)

// inScope passes the Namespaces whose names scope may contain: a label change
// on any other namespace concerns no workload of this installation (and with a
// watch list the cache holds no workloads there to list).
func inScope(scope *workload.Scope) predicate.Predicate {
	return predicate.NewPredicateFuncs(func(obj client.Object) bool {
		return scope.NameInScope(obj.GetName())
	})
}

// namespaceInScope reports whether scope takes in the namespace called
// name, its labels read from c (the cache); one that cannot be read is not.
func namespaceInScope(c client.Reader, scope *workload.Scope) func(ctx context.Context, name string) bool {
	return func(ctx context.Context, name string) bool {
		if scope == nil {
			return true
		}
		if !scope.NameInScope(name) {
			return false
		}
		ns := &corev1.Namespace{}
		if err := c.Get(ctx, client.ObjectKey{Name: name}, ns); err != nil {
			return false
		}
		return scope.InScope(name, ns.Labels)
	}
}
