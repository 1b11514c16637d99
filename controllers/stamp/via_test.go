package stamp

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestWorkloadReferencesSayHow(t *testing.T) {
	spec := &corev1.PodSpec{
		Volumes: []corev1.Volume{
			{Name: "v", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "a"}}}},
			{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "s"}, Items: []corev1.KeyToPath{{Key: "k"}}}}}}}},
		},
		InitContainers: []corev1.Container{{Name: "init", EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "s2"}}}}}},
		Containers: []corev1.Container{{Name: "app", Env: []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{
			ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "a"}, Key: "x"}}}}}},
	}
	ann := map[string]string{AnnotationExtraConfigMaps: "e, bad_name"}
	got, problems := WorkloadReferences(ann, spec)
	want := []Reference{
		{Ref: ObjectRef{KindConfigMap, "a"}, Via: ViaVolume, Where: "v"},
		{Ref: ObjectRef{KindSecret, "s"}, Via: ViaProjected, Keys: []string{"k"}, Where: "p"},
		{Ref: ObjectRef{KindSecret, "s2"}, Via: ViaEnvFrom, Where: "init"},
		{Ref: ObjectRef{KindConfigMap, "a"}, Via: ViaKeyRef, Keys: []string{"x"}, Where: "app"},
		{Ref: ObjectRef{KindConfigMap, "e"}, Via: ViaExtra, Where: AnnotationExtraConfigMaps},
	}
	if !slices.EqualFunc(got, want, func(a, b Reference) bool {
		return a.Ref == b.Ref && a.Via == b.Via && a.Where == b.Where && slices.Equal(a.Keys, b.Keys) && (a.Keys == nil) == (b.Keys == nil)
	}) {
		t.Errorf("WorkloadReferences:\n got %+v\nwant %+v", got, want)
	}
	// The same references, merged, are exactly WorkloadRefs'.
	refs, wantProblems := WorkloadRefs(ann, spec)
	merged := NewRefs()
	for _, r := range got {
		r.Add(merged)
	}
	if !slices.Equal(merged.IndexValues(), refs.IndexValues()) || len(problems) != len(wantProblems) || len(problems) != 1 {
		t.Errorf("merged %v (%d problems), WorkloadRefs %v (%d problems)", merged.IndexValues(), len(problems), refs.IndexValues(), len(wantProblems))
	}
	for _, o := range refs.Objects() {
		a, b := merged.Keys(o), refs.Keys(o)
		if a.All != b.All || !slices.Equal(a.Sorted(), b.Sorted()) {
			t.Errorf("%s: keys %+v, WorkloadRefs %+v", o, a, b)
		}
	}
}
