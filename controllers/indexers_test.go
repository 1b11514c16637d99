package controllers

import (
	"maps"
	"reflect"
	"slices"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/rollout"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// The cache keeps only the references of a pod template; what configstamp
// computes from the stripped template must equal what the full one gives.
func TestStripWorkloadKeepsReferences(t *testing.T) {
	keyRef := func(cm, key string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: cm}, Key: key}}
	}
	container := corev1.Container{
		Name: "app", Image: "img", Command: []string{"run"},
		Env: []corev1.EnvVar{
			{Name: "PLAIN", Value: "x"},
			{Name: "A", ValueFrom: keyRef("cm-a", "k")},
			{Name: "S", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "sec"}, Key: "p"}}},
			{Name: "F", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
		},
		EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm-all"}}}},
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "d",
			Labels: map[string]string{stamp.LabelEnabled: "true", "team": "a"},
			Annotations: map[string]string{stamp.AnnotationExtraSecrets: "extra", stamp.AnnotationAppliedHash: "v1-y",
				"deployment.kubernetes.io/revision": "3", "note": "long text"}},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "d"}}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "d"},
				Annotations: map[string]string{stamp.AnnotationHash: "v1-x", "kubectl.kubernetes.io/restartedAt": "now"}},
			Spec: corev1.PodSpec{
				InitContainers: []corev1.Container{{Name: "init", EnvFrom: []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
					LocalObjectReference: corev1.LocalObjectReference{Name: "init-sec"}}}}}},
				Containers: []corev1.Container{container},
				Volumes: []corev1.Volume{
					{Name: "c", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: "vol"}, Items: []corev1.KeyToPath{{Key: "one", Path: "1"}}}}},
					{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
						{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "proj"}}}}}}},
					{Name: "e", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
				},
			},
		}},
		Status: appsv1.DeploymentStatus{Conditions: []appsv1.DeploymentCondition{{
			Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse, Reason: "ProgressDeadlineExceeded", Message: "long text"}}},
	}
	hasher := stamp.NewHasher([]byte("0123456789abcdef"))
	compute := func(d *appsv1.Deployment) (stamp.Result, []string) {
		refs, _ := stamp.WorkloadRefs(d.Annotations, &d.Spec.Template.Spec)
		return hasher.Compute("ns", refs, nil), refs.IndexValues()
	}
	wantHash, wantIndex := compute(d)

	stripped := d.DeepCopy()
	if _, err := slimWorkload(workload.NewRegistry().All()[0], stripped); err != nil {
		t.Fatal(err)
	}
	gotHash, gotIndex := compute(stripped)
	if !reflect.DeepEqual(gotHash, wantHash) || !reflect.DeepEqual(gotIndex, wantIndex) {
		t.Fatalf("stripped template computes %v %v, full one %v %v", gotHash, gotIndex, wantHash, wantIndex)
	}
	if c := stripped.Spec.Template.Spec.Containers[0]; c.Image != "" || len(c.Command) != 0 || len(c.Env) != 2 {
		t.Fatalf("stripped container keeps more than references: %+v", c)
	}
	if len(stripped.Spec.Template.Spec.Volumes) != 2 || stripped.Spec.Template.Labels["app"] != "d" ||
		stripped.Spec.Template.Annotations[stamp.AnnotationHash] != "v1-x" {
		t.Fatalf("stripped template lost what configstamp reads: %+v", stripped.Spec.Template)
	}
	if c := stripped.Status.Conditions; len(c) != 1 || c[0].Reason != "ProgressDeadlineExceeded" || c[0].Message != "" {
		t.Fatalf("conditions = %+v", c)
	}
	if want := map[string]string{stamp.LabelEnabled: "true"}; !maps.Equal(stripped.Labels, want) {
		t.Errorf("labels = %v, want %v", stripped.Labels, want)
	}
	if want := map[string]string{stamp.AnnotationExtraSecrets: "extra", stamp.AnnotationAppliedHash: "v1-y"}; !maps.Equal(stripped.Annotations, want) {
		t.Errorf("annotations = %v, want %v", stripped.Annotations, want)
	}
	if want := map[string]string{stamp.AnnotationHash: "v1-x"}; !maps.Equal(stripped.Spec.Template.Annotations, want) {
		t.Errorf("template annotations = %v, want %v", stripped.Spec.Template.Annotations, want)
	}
	if stripped.Spec.Selector != nil {
		t.Errorf("selector kept: %v", stripped.Spec.Selector)
	}
	if on, _ := stamp.Enabled(stripped.Labels, nil); !on {
		t.Errorf("stripped workload no longer opted in")
	}
}

// IndexHalted indexes a workload by the source of every change its sealed,
// failed record halts (e.g. ConfigMap/shared), once each; a halt configstamp
// did not seal, or one altered or moved since, indexes nothing.
func TestIndexHalted(t *testing.T) {
	shared := rollout.Change{Ref: stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "shared"}, Content: "x"}
	sharedY := rollout.Change{Ref: shared.Ref, Content: "y"}
	secret := rollout.Change{Ref: stamp.ObjectRef{Kind: stamp.KindSecret, Name: "creds"}, Content: "z"}
	failed := func(halt bool, causes ...rollout.Change) *appsv1.Deployment {
		return withRecord(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "d", UID: "uid-d"}},
			rollout.StartRecord(t0, causes, false).Fail(halt), testKeys.Current())
	}
	tests := map[string]struct {
		obj  *appsv1.Deployment
		want []string
	}{
		"sealed halt of ConfigMap/shared@x": {obj: failed(true, shared), want: []string{"ConfigMap/shared"}},
		"sealed halt of several changes":    {obj: failed(true, shared, sharedY, secret), want: []string{"ConfigMap/shared", "Secret/creds"}},
		"sealed failure, not halting":       {obj: failed(false, shared)},
		"sealed, rolling":                   {obj: withRecord(&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{UID: "uid-d"}}, rollout.StartRecord(t0, []rollout.Change{shared}, false), testKeys.Current())},
		"hand-written halted": {obj: &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{UID: "uid-d",
			Annotations: map[string]string{rollout.AnnotationHalted: shared.String()}}}},
		"hand-written failed record": {obj: &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{UID: "uid-d",
			Annotations: map[string]string{rollout.AnnotationState: string(rollout.Failed), rollout.AnnotationHalted: shared.String()}}}},
		// Indexed as written (a replica may learn the key after it indexed
		// the record); haltInForce verifies the seal where the index is read
		// and ignores these (TestHaltHoldsOnlyWhenSealedAndStillFailing).
		"halted changed after sealing": {obj: func() *appsv1.Deployment {
			d := failed(true, shared)
			d.Annotations[rollout.AnnotationHalted] = secret.String()
			return d
		}(), want: []string{"Secret/creds"}},
		"copied onto another workload": {obj: func() *appsv1.Deployment {
			d := failed(true, shared)
			d.UID = "uid-other"
			return d
		}(), want: []string{"ConfigMap/shared"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			if got := indexHalted(tc.obj); !slices.Equal(got, tc.want) {
				t.Fatalf("indexed by %q, want %q", got, tc.want)
			}
		})
	}
}

// TestCacheLeavesSnapshotsOut: the ConfigMap and Secret informers list and
// watch without the snapshots of pinned config (they are copies, never
// sources), so pinning adds nothing to the cache.
func TestCacheLeavesSnapshotsOut(t *testing.T) {
	found := 0
	for obj, by := range CacheOptions(nil, nil, true).ByObject {
		switch obj.(type) {
		case *corev1.ConfigMap, *corev1.Secret:
			found++
			if by.Label == nil || by.Label.Matches(labels.Set{pin.LabelSnapshot: "true"}) || !by.Label.Matches(labels.Set{"app": "x"}) {
				t.Errorf("%T cache selector %v: want every object but snapshots", obj, by.Label)
			}
		}
	}
	if found != 2 {
		t.Fatalf("found %d ConfigMap/Secret cache entries, want 2", found)
	}
}
