package controllers

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/workload"
)

func TestUnmountableReadsTheStampedData(t *testing.T) {
	tmpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{
		ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"},
			Items: []corev1.KeyToPath{{Key: "b", Path: "b"}}}}}}}}
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "web", UID: "web-uid"}, Spec: appsv1.DeploymentSpec{Template: *tmpl}}
	for name, tc := range map[string]struct {
		data    map[string]string
		stamped bool
		want    string
	}{
		"the key gone, the stamped data":   {map[string]string{"a": "1"}, true, `volume "cfg" needs key "b" of ConfigMap/app, which ConfigMap/app does not have`},
		"the key gone, data changed since": {map[string]string{"a": "1"}, false, ""},
		"the key there":                    {map[string]string{"a": "1", "b": "2"}, true, ""},
	} {
		t.Run(name, func(t *testing.T) {
			c := indexedBuilder(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "app"}, Data: tc.data}, d).Build()
			r := &kindReconciler{Kind: workload.NewRegistry().All()[0], WorkloadReconciler: &WorkloadReconciler{Client: c,
				Resolver: &workload.Resolver{Sources: c, Index: c, Keys: testKeys}}}
			comp, err := r.Resolver.Compute(t.Context(), "ns", nil, tmpl)
			if err != nil {
				t.Fatal(err)
			}
			hash := comp.Hash
			if !tc.stamped {
				hash = "v1-another"
			}
			got := strings.Join(r.unmountable(t.Context(), d, tmpl, hash), "; ")
			if got != tc.want {
				t.Errorf("unmountable = %q, want %q", got, tc.want)
			}
		})
	}
}

// A halted workload's pods, whose health lifts the halt, are read
// consistently, never from the API server's watch cache (ResourceVersion
// "0"), which on a saturated machine showed a crashing pod Ready long
// after it exited again; an open rollout's polls may read the cache.
func TestAHaltsLiftReadsPodsConsistently(t *testing.T) {
	for rule, cached := range map[rollout.Rule]bool{rollout.RuleLasting: false, rollout.RuleRolling: true, rollout.RuleVerifying: true, rollout.RuleCrashing: true} {
		o := podsListOptions(rule)
		if got := o.Raw != nil && o.Raw.ResourceVersion == "0"; got != cached {
			t.Errorf("rule %v: pods listed from the watch cache %v, want %v", rule, got, cached)
		}
	}
}
