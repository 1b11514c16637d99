package controllers

import (
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/workload"
)

// indexedBuilder is a fake client builder holding objs, with the field
// indexes the reconciler and the webhook read: the rollout selectors of
// ConfigMaps and Secrets, and the halted and rolling workloads of every kind.
func indexedBuilder(objs ...client.Object) *fake.ClientBuilder {
	b := fake.NewClientBuilder().WithObjects(objs...).
		WithIndex(&corev1.ConfigMap{}, workload.IndexHasSelector, workload.IndexHasSelectorFunc).
		WithIndex(&corev1.Secret{}, workload.IndexHasSelector, workload.IndexHasSelectorFunc)
	for _, k := range workload.NewRegistry().All() {
		b = b.WithIndex(k.New(), IndexHalted, indexHalted).WithIndex(k.New(), rollout.IndexRolling, rollout.IndexRollingFunc).WithIndex(k.New(), rollout.IndexPassed, rollout.IndexPassedFunc)
	}
	return b
}
