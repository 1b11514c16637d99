package controllers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// A stamp whose write timed out after the API server applied it (a fenced
// write's deadline passing while the response is read, seen under load in
// test/safety's 100-workload wave) is a rollout started: it is announced
// (one ConfigChanged event, one count in configstamp_rollouts_started_total)
// and keeps its budget slot. A write that did not land is an error, and
// gives its slot back.
func TestStampWhoseWriteTimedOut(t *testing.T) {
	timeout := fmt.Errorf("unexpected error when reading response body. Please retry. Original error: %w", context.DeadlineExceeded)
	for name, applied := range map[string]bool{"applied": true, "not applied": false} {
		t.Run(name, func(t *testing.T) {
			app := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app", UID: "uid-app",
				Labels: map[string]string{stamp.LabelEnabled: "true"}},
				Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{stamp.AnnotationHash: "v1-old"}},
					Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "c", VolumeSource: corev1.VolumeSource{
						ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "shared"}}}}}}}}}
			patches := 0
			c := indexedBuilder(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}, app,
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "shared"}, Data: map[string]string{"k": "new"}}).
				WithInterceptorFuncs(interceptor.Funcs{Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
					patches++
					if applied {
						if err := c.Patch(ctx, obj, p, opts...); err != nil {
							return err
						}
					}
					return timeout
				}, List: func(ctx context.Context, c client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
					if _, ok := list.(*appsv1.DeploymentList); ok {
						return nil // the cache shows no rollout under way yet: only this process's slot counts
					}
					return c.List(ctx, list, opts...)
				}}).Build()
			rec := events.NewFakeRecorder(10)
			kinds := workload.NewRegistry()
			r := &WorkloadReconciler{Client: c, APIReader: c, Kinds: kinds, Recorder: rec,
				Resolver: &workload.Resolver{Sources: c, Index: c, Keys: testKeys},
				Scheduler: rollout.NewScheduler(rollout.Policy{MaxConcurrent: 2, HaltOnFailure: true, ProgressDeadline: time.Minute},
					c, testKeys, kinds)}
			started := testutil.ToFloat64(rollout.StartedTotal.WithLabelValues("Deployment"))

			_, err := r.Reconcile(t.Context(), rollout.Key{Kind: "Deployment", Namespace: "ns", Name: "app"})
			if patches != 1 {
				t.Fatalf("%d patches, want the stamp's one", patches)
			}
			close(rec.Events)
			var changed int
			for e := range rec.Events {
				if strings.Contains(e, ReasonConfigChanged) {
					changed++
				}
			}
			slots, serr := r.Scheduler.SlotsInUse(t.Context())
			if serr != nil {
				t.Fatal(serr)
			}
			count := testutil.ToFloat64(rollout.StartedTotal.WithLabelValues("Deployment")) - started
			if applied {
				if err != nil || changed != 1 || count != 1 || slots != 1 {
					t.Errorf("a stamp that landed: reconcile error %v, %d ConfigChanged events, %v rollouts counted, %d slots held; "+
						"want no error, one event, one count, one slot", err, changed, count, slots)
				}
				return
			}
			if !errors.Is(err, context.DeadlineExceeded) || changed != 0 || count != 0 || slots != 0 {
				t.Errorf("a stamp that did not land: reconcile error %v, %d ConfigChanged events, %v rollouts counted, %d slots held; "+
					"want the error, no event, no count, no slot", err, changed, count, slots)
			}
		})
	}
}

// landed reads the workload only after an error that may follow an applied
// write, and calls the write done only when every annotation it wrote (a
// nil one: removed) is there as written.
func TestLanded(t *testing.T) {
	app := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app",
		Annotations: map[string]string{"a": "1", "b": "2"}}}
	reads := 0
	c := indexedBuilder(app).WithInterceptorFuncs(interceptor.Funcs{Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
		reads++
		return c.Get(ctx, key, obj, opts...)
	}}).Build()
	r := &kindReconciler{WorkloadReconciler: &WorkloadReconciler{Client: c, APIReader: c}, Kind: workload.NewRegistry().All()[0]}
	timeout := fmt.Errorf("while patching ns/app: %w", context.DeadlineExceeded)
	conflict := apierrors.NewConflict(schema.GroupResource{Resource: "deployments"}, "app", errors.New("changed"))
	for _, tc := range []struct {
		name   string
		meta   map[string]any
		err    error
		landed bool
		reads  int
	}{
		{"no error", map[string]any{"a": "1"}, nil, false, 0},
		{"a conflict: nothing was written", map[string]any{"a": "1"}, conflict, false, 0},
		{"every annotation as written", map[string]any{"a": "1", "b": "2", "c": nil}, timeout, true, 1},
		{"a value that differs", map[string]any{"a": "1", "b": "3"}, timeout, false, 1},
		{"one to remove is still there", map[string]any{"a": "1", "b": nil}, timeout, false, 1},
	} {
		reads = 0
		live, err := r.landed(t.Context(), app, tc.meta, tc.err)
		if (live != nil) != tc.landed || reads != tc.reads {
			t.Errorf("%s: landed %v (%d reads), want %v (%d)", tc.name, live != nil, reads, tc.landed, tc.reads)
		}
		if !tc.landed && !errors.Is(err, tc.err) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.err)
		}
		if tc.landed && err != nil {
			t.Errorf("%s: error %v, want none", tc.name, err)
		}
	}
}
