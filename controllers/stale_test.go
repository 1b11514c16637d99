package controllers

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// A reconcile that reads the workload from a cache that has not yet seen the
// stamp this process just wrote (the next reconcile of a wave runs 40–50 ms
// before the watch delivers it) must not stamp it again: one rollout, one
// ConfigChanged event, one count in configstamp_rollouts_started_total, and
// the budget's slot still held by the rollout under way.
func TestStaleReadStampsOnce(t *testing.T) {
	for name, policy := range map[string]rollout.Policy{
		"budget and halt": {MaxConcurrent: 2, HaltOnFailure: true, ProgressDeadline: time.Minute},
		"neither":         {ProgressDeadline: time.Minute},
	} {
		t.Run(name, func(t *testing.T) {
			app := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", UID: "uid-app",
				Labels: map[string]string{stamp.LabelEnabled: "true"}},
				Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{stamp.AnnotationHash: "v1-old"}},
					Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "c", VolumeSource: corev1.VolumeSource{
						ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "shared"}}}}}}}}}
			var stale *appsv1.Deployment // set: the cache serves this copy of app
			c := indexedBuilder(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}, app,
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "shared"}, Data: map[string]string{"k": "new"}}).
				WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if d, ok := obj.(*appsv1.Deployment); ok && stale != nil {
						stale.DeepCopyInto(d)
						return nil
					}
					return c.Get(ctx, key, obj, opts...)
				}, List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
					if _, ok := list.(*appsv1.DeploymentList); ok && stale != nil {
						return nil // this cache shows no rollout under way yet
					}
					return c.List(ctx, list, opts...)
				}}).Build()
			rec := events.NewFakeRecorder(10)
			kinds := workload.NewRegistry()
			r := &WorkloadReconciler{Client: c, Kinds: kinds, Recorder: rec,
				Resolver:  &workload.Resolver{Sources: c, Index: c, Keys: testKeys},
				Scheduler: rollout.NewScheduler(policy, c, testKeys, kinds)}
			req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: "app"}}

			before := &appsv1.Deployment{}
			if err := c.Get(t.Context(), req.NamespacedName, before); err != nil {
				t.Fatal(err)
			}
			if _, err := r.Reconcile(t.Context(), rollout.Key{Kind: "Deployment", Namespace: req.Namespace, Name: req.Name}); err != nil {
				t.Fatal(err)
			}
			stamped := &appsv1.Deployment{}
			if err := c.Get(t.Context(), req.NamespacedName, stamped); err != nil {
				t.Fatal(err)
			}
			if h := stamped.Spec.Template.Annotations[stamp.AnnotationHash]; h == "v1-old" {
				t.Fatalf("the first reconcile did not stamp: %s", h)
			}
			stale = before // the watch has not delivered the stamp yet
			res, err := r.Reconcile(t.Context(), rollout.Key{Kind: "Deployment", Namespace: req.Namespace, Name: req.Name})
			if err != nil || res.RequeueAfter <= 0 {
				t.Fatalf("reconcile of a stale read = %+v, %v; want to ask again shortly", res, err)
			}
			if policy.MaxConcurrent > 0 {
				// The cache shows no open record yet: the slot is held by this
				// process's stamp alone, and must stay held.
				if n, err := r.Scheduler.SlotsInUse(t.Context()); err != nil || n != 1 {
					t.Errorf("slots in use %d (%v), want 1: the rollout under way keeps its slot", n, err)
				}
			}
			stale = nil
			after := &appsv1.Deployment{}
			if err := c.Get(t.Context(), req.NamespacedName, after); err != nil {
				t.Fatal(err)
			}
			if after.ResourceVersion != stamped.ResourceVersion {
				t.Errorf("the stale reconcile wrote the workload again (resourceVersion %s → %s)", stamped.ResourceVersion, after.ResourceVersion)
			}
			close(rec.Events)
			var changed int
			for e := range rec.Events {
				if strings.Contains(e, ReasonConfigChanged) {
					changed++
				}
			}
			if changed != 1 {
				t.Errorf("%d ConfigChanged events, want 1", changed)
			}
		})
	}
}
