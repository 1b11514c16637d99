package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

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

// When the webhook's consistent read corrects the reconciler's stamp to a
// third value (the cache one version behind: v1 → v2 proposed, v3 kept), the
// template did change: that is a rollout, reported like any other. Only a
// correction back to the stamp already there means nothing rolled.
func TestWebhookCorrectionToANewerHashIsARollout(t *testing.T) {
	for name, tc := range map[string]struct {
		kept    string
		rolled  bool
		dropped bool
	}{
		"corrected to a newer hash": {kept: "v1-third", rolled: true},
		"kept the current stamp":    {kept: "v1-first", rolled: false},
		// A CRD whose schema prunes the template's metadata: the patch
		// succeeds and the stamp is gone. Nothing can roll it; an event says so.
		"stamp pruned by the API server": {kept: "", dropped: true},
	} {
		t.Run(name, func(t *testing.T) {
			d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app"},
				Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{
					Annotations: map[string]string{stamp.AnnotationHash: "v1-first"}}}}}
			webhook := interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
				if err := c.Patch(ctx, obj, patch, opts...); err != nil {
					return err
				}
				w := obj.(*appsv1.Deployment)
				w.Spec.Template.Annotations[stamp.AnnotationHash] = tc.kept
				if tc.kept == "" {
					delete(w.Spec.Template.Annotations, stamp.AnnotationHash)
				}
				return c.Update(ctx, w)
			}}
			c := fake.NewClientBuilder().WithObjects(d).WithInterceptorFuncs(webhook).Build()
			rec := events.NewFakeRecorder(10)
			r := &WorkloadReconciler{Client: c, Kind: workload.Kinds[0], Recorder: rec,
				Scheduler: rollout.NewScheduler(rollout.Policy{ProgressDeadline: time.Hour}, c), Nudger: NewNudger()}
			obj := d.DeepCopy()
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(d), obj); err != nil {
				t.Fatal(err)
			}
			p := &plan{comp: &workload.Computation{Result: stamp.Result{Hash: "v1-second"}},
				causes: []rollout.Change{{Ref: stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "cfg"}, Content: "00aa"}}}
			if err := r.roll(t.Context(), rollout.Key{Kind: "Deployment", Namespace: "ns", Name: "app"}, obj, p); err != nil {
				t.Fatal(err)
			}
			var got []string
			for len(rec.Events) > 0 {
				got = append(got, <-rec.Events)
			}
			if tc.rolled && (len(got) != 1 || !strings.Contains(got[0], ReasonConfigChanged) || !strings.Contains(got[0], tc.kept)) {
				t.Fatalf("events %q: want one %s naming the stamp %s", got, ReasonConfigChanged, tc.kept)
			}
			if tc.dropped && (len(got) != 1 || !strings.Contains(got[0], ReasonStampDropped)) {
				t.Fatalf("events %q: want one %s", got, ReasonStampDropped)
			}
			if !tc.rolled && !tc.dropped && len(got) != 0 {
				t.Fatalf("events %q: nothing rolled, want none", got)
			}
		})
	}
}
