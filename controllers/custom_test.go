package controllers

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
	"github.com/configstamp/configstamp/controllers/workload/kindstest"
)

// An object of an extra kind with no pod template where the kind says (an
// Argo Rollout with workloadRef) is not a workload: its reconcile does
// nothing and fails nothing; opted in, it gets one Warning event saying why.
func TestTemplateLessCustomObjectIsNotAWorkload(t *testing.T) {
	kinds := kindstest.Registry(t, `kinds: [{group: argoproj.io, version: v1alpha1, kind: Rollout, resource: rollouts, templatePath: spec.template}]`)
	kind := kinds.All()[len(kinds.All())-1]
	for name, labels := range map[string]map[string]string{"not opted in": nil, "opted in": {stamp.LabelEnabled: "true"}} {
		t.Run(name, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
				"workloadRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "x"}}}}
			u.SetGroupVersionKind(schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "Rollout"})
			u.SetNamespace("ns")
			u.SetName("r")
			u.SetLabels(labels)
			c := indexedBuilder(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}, u).Build()
			rec := events.NewFakeRecorder(10)
			r := &WorkloadReconciler{Client: c, Kinds: kinds, Recorder: rec,
				Resolver:  &workload.Resolver{Sources: c, Index: c, Keys: testKeys},
				Scheduler: rollout.NewScheduler(rollout.Policy{ProgressDeadline: time.Minute}, c, testKeys, nil)}
			res, err := r.Reconcile(t.Context(), rollout.Key{Kind: kind.Name, Namespace: "ns", Name: "r"})
			if err != nil || res.RequeueAfter != 0 {
				t.Fatalf("reconcile = %+v, %v; want nothing to do", res, err)
			}
			var got []string
			for len(rec.Events) > 0 {
				got = append(got, <-rec.Events)
			}
			if want := len(labels); len(got) != want || (want == 1 && !strings.Contains(got[0], "no pod template configstamp can read at spec.template")) {
				t.Fatalf("events %q, want %d saying there is no template", got, want)
			}
		})
	}
}
