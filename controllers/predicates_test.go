package controllers

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// TestSourceDiffers runs the predicate on cached (digested) objects, as the
// informer hands them over.
func TestSourceDiffers(t *testing.T) {
	cm := func(rv, value string, ann map[string]string) client.Object {
		o := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: "ns", ResourceVersion: rv, Annotations: ann},
			Data: map[string]string{"k": value}}
		stamp.DigestConfigMap(o)
		return o
	}
	secret := func(rv, value string, ann map[string]string) client.Object {
		o := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns", ResourceVersion: rv, Annotations: ann},
			Data: map[string][]byte{"k": []byte(value)}}
		stamp.DigestSecret(o)
		return o
	}
	for kind, mk := range map[string]func(rv, value string, ann map[string]string) client.Object{"ConfigMap": cm, "Secret": secret} {
		t.Run(kind, func(t *testing.T) {
			base := mk("1", "v", nil)
			for name, tc := range map[string]struct {
				next client.Object
				want bool
			}{
				"data changed":                  {mk("2", "w", nil), true},
				"same data, new version":        {mk("2", "v", nil), false},
				"unrelated annotation":          {mk("2", "v", map[string]string{"team": "a"}), false},
				"ignore annotation":             {mk("2", "v", map[string]string{stamp.AnnotationIgnore: "true"}), true},
				"rollout selector":              {mk("2", "v", map[string]string{stamp.AnnotationRolloutSelector: "app=x"}), true},
				"podDeleteMatch selector alias": {mk("2", "v", map[string]string{stamp.AnnotationPodDeleteMatch: "app=x"}), true},
			} {
				if got := SourceDiffers(base, tc.next); got != tc.want {
					t.Errorf("%s: SourceDiffers = %v, want %v", name, got, tc.want)
				}
			}
		})
	}
}

// A completed workload's status update passes when it counts fewer pods
// ready (a crash: it may fail while its change still rolls elsewhere), not
// when it counts more, and a workload with no rollout of configstamp's
// passes no status update at all.
func TestWorkloadChangedPassesACompletedWorkloadLosingReadiness(t *testing.T) {
	dep := func(state string, ready int32) *appsv1.Deployment {
		d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w", Generation: 1}}
		if state != "" {
			d.Annotations = map[string]string{rollout.AnnotationState: state}
		}
		d.Status.ReadyReplicas, d.Status.AvailableReplicas = ready, ready
		return d
	}
	p := workloadChanged(workload.NewRegistry().All()[0])
	for name, tc := range map[string]struct {
		old, new *appsv1.Deployment
		want     bool
	}{
		"completed, a pod went unready": {dep("completed", 3), dep("completed", 2), true},
		"completed, a pod became ready": {dep("completed", 2), dep("completed", 3), false},
		"no record, a pod went unready": {dep("", 3), dep("", 2), false},
		"rolling: every status update":  {dep("rolling", 2), dep("rolling", 3), true},
	} {
		t.Run(name, func(t *testing.T) {
			if got := p.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
				t.Fatalf("passes %v, want %v", got, tc.want)
			}
		})
	}
}
