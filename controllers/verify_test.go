package controllers

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
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
