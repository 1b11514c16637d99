package controllers

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
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
