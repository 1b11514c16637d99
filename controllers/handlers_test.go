package controllers

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// A source change concerns workloads of several kinds. The one controller's
// mapper sees them all at once: it announces every one of them before it
// queues any, so a low-priority Deployment asking first does not take the
// only slot ahead of a high-priority StatefulSet, and both are queued on the
// one queue, each under its kind.
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
		b = b.WithIndex(k.New(), IndexSources, indexWorkloadSources(k)).WithIndex(k.New(), rollout.IndexRolling, rollout.IndexRollingFunc).WithIndex(k.New(), rollout.IndexPassed, rollout.IndexPassedFunc)
	}
	c := b.Build()
	s := rollout.NewScheduler(rollout.Policy{MaxConcurrent: 1, ProgressDeadline: time.Hour}, c, testKeys, nil)
	m := &mapper{client: c, scheduler: s}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[rollout.Key]())
	defer q.ShutDown()

	m.sourceHandler(stamp.KindConfigMap).Update(t.Context(), event.UpdateEvent{
		ObjectOld: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "shared"}, Data: map[string]string{"k": "1"}},
		ObjectNew: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "shared"}, Data: map[string]string{"k": "2"}},
	}, q)
	depKey := rollout.Key{Kind: "Deployment", Namespace: "ns", Name: "low"}
	stsKey := rollout.Key{Kind: "StatefulSet", Namespace: "ns", Name: "high"}
	queued := map[rollout.Key]bool{}
	for q.Len() > 0 {
		k, _ := q.Get()
		queued[k] = true
		q.Done(k)
	}
	if len(queued) != 2 || !queued[depKey] || !queued[stsKey] {
		t.Fatalf("queued %v, want the Deployment and the StatefulSet, each under its kind", queued)
	}
	if w, err := s.Acquire(t.Context(), depKey, 0, true); err != nil || w == 0 {
		t.Fatalf("the priority-0 Deployment took the only slot ahead of the priority-10 StatefulSet (wait %v, err %v)", w, err)
	}
	if w, err := s.Acquire(t.Context(), stsKey, 10, true); err != nil || w != 0 {
		t.Fatalf("the StatefulSet: wait %v, err %v", w, err)
	}
}

// A halt lifted queues its waiters, of any kind, on the one queue: no
// other controller to wake.
func TestHaltLiftedQueuesWaitersOfEveryKind(t *testing.T) {
	s := rollout.NewScheduler(rollout.Policy{HaltOnFailure: true, ProgressDeadline: time.Hour}, fake.NewClientBuilder().Build(), testKeys, nil)
	change := rollout.Change{Ref: stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}, Content: "c1"}
	waiters := []rollout.Key{{Kind: "Deployment", Namespace: "ns", Name: "a"}, {Kind: "StatefulSet", Namespace: "ns", Name: "b"}}
	for _, k := range waiters {
		s.NoteHalted(k, change.String(), 0)
	}
	failed := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "failed",
		Annotations: map[string]string{rollout.AnnotationHalted: change.String()}}}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[rollout.Key]())
	defer q.ShutDown()

	everywhere := func(context.Context, string) bool { return true }
	haltLifted(s, everywhere).Delete(t.Context(), event.DeleteEvent{Object: failed}, q)
	queued := map[rollout.Key]bool{}
	for q.Len() > 0 {
		k, _ := q.Get()
		queued[k] = true
		q.Done(k)
	}
	for _, k := range waiters {
		if !queued[k] {
			t.Errorf("%s not queued when the halt lifted; queued %v", k, queued)
		}
	}
}

// Another installation's workload (a namespace outside this one's scope)
// lifts no halt here: nothing is queued, nothing counted as resumed.
func TestHaltLiftedOutOfScopeIsPassedOver(t *testing.T) {
	s := rollout.NewScheduler(rollout.Policy{HaltOnFailure: true, ProgressDeadline: time.Hour}, fake.NewClientBuilder().Build(), testKeys, nil)
	change := rollout.Change{Ref: stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}, Content: "c1"}
	waiter := rollout.Key{Kind: "Deployment", Namespace: "mine", Name: "a"}
	s.NoteHalted(waiter, change.String(), 0)
	scope, err := workload.NewScope("configstamp-system", nil, nil, "team=mine")
	if err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithObjects(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "mine", Labels: map[string]string{"team": "mine"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "theirs", Labels: map[string]string{"team": "theirs"}}}).Build()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[rollout.Key]())
	defer q.ShutDown()
	lifted := func(ns string) {
		failed := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "failed",
			Annotations: map[string]string{rollout.AnnotationHalted: change.String()}}}
		haltLifted(s, namespaceInScope(c, scope)).Delete(t.Context(), event.DeleteEvent{Object: failed}, q)
	}
	before := testutil.ToFloat64(rollout.Resumed)
	lifted("theirs")
	if q.Len() != 0 || testutil.ToFloat64(rollout.Resumed) != before {
		t.Fatalf("a halt lifted in another installation's namespace queued %d, resumed %v times; want nothing", q.Len(), testutil.ToFloat64(rollout.Resumed)-before)
	}
	lifted("mine")
	if q.Len() != 1 || testutil.ToFloat64(rollout.Resumed) != before+1 {
		t.Fatalf("a halt lifted in scope queued %d, resumed %v times; want its waiter, once", q.Len(), testutil.ToFloat64(rollout.Resumed)-before)
	}
}
