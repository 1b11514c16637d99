package controllers

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
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
