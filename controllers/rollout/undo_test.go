package rollout

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/stamp"
)

// An undo returns only over configstamp's own change: the failed template
// may differ from the revision it returns to in its stamp and its
// snapshots, never in anything a user edited meanwhile.
func TestEditedSince(t *testing.T) {
	template := func(hash, snapshot, image string) *corev1.PodTemplateSpec {
		return &corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}, Annotations: map[string]string{
				stamp.AnnotationHash: hash, pin.AnnotationPinned: "ConfigMap/" + snapshot + "=shared"}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: image}},
				Volumes: []corev1.Volume{{Name: "config", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: snapshot}}}}}},
		}
	}
	prev := template("v1-old", "shared-old", "app:1")
	tests := map[string]struct {
		failed *corev1.PodTemplateSpec
		want   string
	}{
		"only configstamp's stamp and snapshot changed": {template("v1-new", "shared-new", "app:1"), ""},
		"an image edited during the failing rollout":    {template("v1-new", "shared-new", "app:2"), "its pod spec"},
		"a restart annotation added": {func() *corev1.PodTemplateSpec {
			t := template("v1-new", "shared-new", "app:1")
			t.Annotations["kubectl.kubernetes.io/restartedAt"] = "2026-11-27T12:00:00Z"
			return t
		}(), "its annotations"},
		"a label changed": {func() *corev1.PodTemplateSpec {
			t := template("v1-new", "shared-new", "app:1")
			t.Labels["tier"] = "front"
			return t
		}(), "its labels"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := editedSince(tc.failed, prev); (got == "") != (tc.want == "") || !strings.Contains(got, tc.want) {
				t.Fatalf("editedSince = %q, want %q", got, tc.want)
			}
		})
	}
}
