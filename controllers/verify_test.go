package controllers

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/configstamp/configstamp/controllers/workload"
)

// TestOwnPods: the pods of a workload are its controller's, not those of
// another workload whose template has the same labels (a canary beside its
// main Deployment, both mounting the same ConfigMap, carry the same stamp).
func TestOwnPods(t *testing.T) {
	owned := func(name, kind, owner, hash string, uid string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{appsv1.DefaultDeploymentUniqueLabelKey: hash},
			OwnerReferences: []metav1.OwnerReference{{Kind: kind, Name: owner, UID: types.UID(uid), Controller: ptr.To(true)}}}}
	}
	pods := []corev1.Pod{
		owned("web-abc-1", "ReplicaSet", "web-abc", "abc", "rs1"),
		owned("web-canary-abc-1", "ReplicaSet", "web-canary-abc", "abc", "rs2"),
		owned("db-0", "StatefulSet", "db", "", "sts-uid"),
		{ObjectMeta: metav1.ObjectMeta{Name: "bare"}},
	}
	web := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Name: "web", UID: "web-uid"}}
	db := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: "db", UID: "sts-uid"}}
	names := func(ps []corev1.Pod) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return out
	}
	if got := names(ownPods(web, pods)); !slices.Equal(got, []string{"web-abc-1"}) {
		t.Errorf("web's pods: %v", got)
	}
	if got := names(ownPods(db, pods)); !slices.Equal(got, []string{"db-0"}) {
		t.Errorf("db's pods: %v", got)
	}
}

// TestUnmountableReadsTheStampedData: a key an items entry needs and its
// ConfigMap lacks is told only while the cached ConfigMap is the data the
// template was stamped with; a newer change (which will supersede the
// rollout) or a key that exists tells nothing.
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
