package controllers

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// A workload waiting on a halted change asks again later even if the wake-up
// of the halt's lift is missed (the lift landed between its index read and
// its registration as a waiter): it is never left waiting for good.
func TestHaltedWorkloadAsksAgain(t *testing.T) {
	change := rollout.Change{Ref: stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}, Content: "00aa"}
	failed := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "failed",
		Annotations: map[string]string{rollout.AnnotationState: string(rollout.Failed), rollout.AnnotationHalted: change.String()}}}
	waiting := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "waiting"}}
	b := fake.NewClientBuilder().WithObjects(failed, waiting)
	for _, k := range workload.Kinds {
		b = b.WithIndex(k.New(), IndexHalted, indexHalted)
	}
	c := b.Build()
	r := &WorkloadReconciler{Client: c, Kind: workload.Kinds[0], Recorder: events.NewFakeRecorder(10),
		Scheduler: rollout.NewScheduler(rollout.Policy{ProgressDeadline: time.Minute}, c), Nudger: NewNudger()}
	key := rollout.Key{Kind: "Deployment", Namespace: "ns", Name: "waiting"}
	res, open, err := r.gate(t.Context(), key, waiting, &plan{comp: &workload.Computation{}, causes: []rollout.Change{change}})
	if err != nil || open {
		t.Fatalf("gate = open %v, err %v; want halted", open, err)
	}
	if res.RequeueAfter <= 0 {
		t.Fatalf("a halted workload returns %+v: nothing would wake it if the lift's wake-up was missed", res)
	}
}

// A reconcile that reads a workload the cache has not updated yet (its record
// closed by an earlier reconcile, or a newer rollout started since) must not
// close the record again: a rollout ends exactly once.
func TestStaleReadClosesNothing(t *testing.T) {
	started := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", Generation: 1,
		Annotations: map[string]string{rollout.AnnotationState: string(rollout.Rolling), rollout.AnnotationStarted: started}},
		Spec:   appsv1.DeploymentSpec{Replicas: new(int32(1))},
		Status: appsv1.DeploymentStatus{ObservedGeneration: 1, Replicas: 1, UpdatedReplicas: 1, AvailableReplicas: 1}}
	c := fake.NewClientBuilder().WithObjects(d).Build()
	stale := d.DeepCopy()
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(d), stale); err != nil {
		t.Fatal(err)
	}
	// Meanwhile a newer rollout started: the stored record is open again.
	fresh := stale.DeepCopy()
	fresh.Annotations[rollout.AnnotationStarted] = time.Now().UTC().Format(time.RFC3339)
	if err := c.Update(t.Context(), fresh); err != nil {
		t.Fatal(err)
	}
	r := &WorkloadReconciler{Client: c, Kind: workload.Kinds[0], Recorder: events.NewFakeRecorder(10),
		Scheduler: rollout.NewScheduler(rollout.Policy{ProgressDeadline: time.Hour}, c), Nudger: NewNudger()}
	res, busy, err := r.follow(t.Context(), rollout.Key{Kind: "Deployment", Namespace: "ns", Name: "app"}, stale)
	if err != nil || !busy || res.RequeueAfter <= 0 {
		t.Fatalf("follow on a stale read = %+v busy %v err %v; want to ask again", res, busy, err)
	}
	stored := &appsv1.Deployment{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(d), stored); err != nil {
		t.Fatal(err)
	}
	if got := stored.Annotations[rollout.AnnotationState]; got != string(rollout.Rolling) {
		t.Fatalf("the newer rollout's record was closed from a stale read: rollout-state %q", got)
	}
}
