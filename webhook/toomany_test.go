package webhook

import (
	"fmt"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/configstamp/configstamp/controllers/stamp"
)

// A workload referencing more than stamp.MaxReferences objects is admitted
// unchanged, with a warning that says why it is not stamped.
func TestTooManyReferencesAdmittedUnstamped(t *testing.T) {
	h, _ := newHandler(t)
	d := deployment(map[string]string{stamp.LabelEnabled: "true"}, nil, nil)
	var sources []corev1.VolumeProjection
	for i := range 300 {
		sources = append(sources, corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: fmt.Sprintf("ref-%04d", i)}}})
	}
	d.Spec.Template.Spec.Volumes = []corev1.Volume{{Name: "all",
		VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: sources}}}}
	for _, op := range []admissionv1.Operation{admissionv1.Create, admissionv1.Update} {
		t.Run(string(op), func(t *testing.T) {
			var old = d.DeepCopy()
			if op == admissionv1.Create {
				old = nil
			} else {
				old.Spec.Template.Spec.Containers[0].Image = "img:0"
			}
			resp := h.Handle(t.Context(), request(t, op, d.DeepCopy(), old))
			if !resp.Allowed {
				t.Fatalf("not allowed: %v", resp.Result)
			}
			if s := stampOf(resp); s != "" || len(resp.Patches) != 0 {
				t.Fatalf("stamp %q, patches %v; want the object admitted unchanged", s, resp.Patches)
			}
			if len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "references more than 256") {
				t.Fatalf("warnings %q, want one saying it references more than 256", resp.Warnings)
			}
		})
	}
}
