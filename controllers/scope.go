package controllers

import (
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
