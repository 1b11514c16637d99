package controllers

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// A source change concerns workloads of several kinds, each kind's controller
// handling the event on its own. Whichever handles it first announces them
// all, so a low-priority Deployment asking first does not take the only slot
// ahead of a high-priority StatefulSet whose controller has not seen the
// event yet.
func TestSourceEventAnnouncesEveryKind(t *testing.T) {
	spec := corev1.PodSpec{Volumes: []corev1.Volume{{Name: "c", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "shared"}}}}}}
	low := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "low"},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: spec}}}
	high := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "high",
		Annotations: map[string]string{rollout.AnnotationPriority: "10"}},
		Spec: appsv1.StatefulSetSpec{Template: corev1.PodTemplateSpec{Spec: spec}}}
	b := fake.NewClientBuilder().WithObjects(low, high)
	for _, k := range workload.NewRegistry().All() {
		b = b.WithIndex(k.New(), IndexSources, indexWorkloadSources(k)).WithIndex(k.New(), rollout.IndexRolling, rollout.IndexRollingFunc)
	}
	c := b.Build()
	s := rollout.NewScheduler(rollout.Policy{MaxConcurrent: 1, ProgressDeadline: time.Hour}, c, testKeys, nil)
	m := &mapper{client: c, kind: workload.NewRegistry().All()[0], scheduler: s}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()

	m.enqueue(t.Context(), stamp.KindConfigMap, q, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "shared"}})
	if q.Len() != 1 {
		t.Fatalf("the Deployment controller queued %d requests, want its one Deployment", q.Len())
	}
	if w, err := s.Acquire(t.Context(), rollout.Key{Kind: "Deployment", Namespace: "ns", Name: "low"}, 0, true); err != nil || w == 0 {
		t.Fatalf("the priority-0 Deployment took the only slot ahead of the priority-10 StatefulSet (wait %v, err %v)", w, err)
	}
	if w, err := s.Acquire(t.Context(), rollout.Key{Kind: "StatefulSet", Namespace: "ns", Name: "high"}, 10, true); err != nil || w != 0 {
		t.Fatalf("the StatefulSet: wait %v, err %v", w, err)
	}
}
