package pin

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/configstamp/configstamp/controllers/stamp"
)

func cm(name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: data}
}

func TestNameIsValidKeyedAndBounded(t *testing.T) {
	h := stamp.NewHasher([]byte("k1"))
	long := strings.Repeat("a", 120) + "." + strings.Repeat("b", 132) // 253 characters, a valid name
	for _, src := range []string{"cfg", long, strings.Repeat("x", 242) + "-y", strings.Repeat("x", 242) + ".y"} {
		name := Name(h, cm(src, map[string]string{"k": "v"}))
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("snapshot name of %q (%d characters) is invalid: %v", src, len(src), errs)
		}
	}
	a := Name(h, cm("cfg", map[string]string{"k": "v"}))
	if a != Name(h, cm("cfg", map[string]string{"k": "v"})) {
		t.Error("the same content gave two names")
	}
	if a == Name(h, cm("cfg", map[string]string{"k": "w"})) {
		t.Error("other content gave the same name")
	}
	if a == Name(stamp.NewHasher([]byte("k2")), cm("cfg", map[string]string{"k": "v"})) {
		t.Error("the name does not depend on the key: anyone could test guesses of the data")
	}
	s1 := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"}, Type: corev1.SecretTypeOpaque, Data: map[string][]byte{"k": []byte("v")}}
	s2 := s1.DeepCopy()
	s2.Type = corev1.SecretTypeBasicAuth
	if Name(h, s1) == Name(h, s2) {
		t.Error("two Secret types gave one name: the snapshot must keep the type")
	}
}

// The same data in two namespaces gets two snapshot names (issue "One
// shared config, many namespaces": a user with view rights in another
// namespace could otherwise test a guess of a Secret there by pinning the
// guess in their own and comparing the names). A name made before the
// namespace entered it still names its snapshot (Names): no pinned
// workload rolls by the upgrade alone.
func TestNameDiffersByNamespace(t *testing.T) {
	h := stamp.NewHasher([]byte("k1"))
	theirs := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "theirs", Name: "db"}, Data: map[string][]byte{"password": []byte("hunter2")}}
	guess := theirs.DeepCopy()
	guess.Namespace = "mine"
	if Name(h, theirs) == Name(h, guess) {
		t.Fatal("the same Secret in two namespaces has one snapshot name: a guess can be tested by comparing names")
	}
	legacy := name(h, theirs, "")
	if legacy == Name(h, theirs) || !Names(h, theirs, legacy) || !Names(h, theirs, Name(h, theirs)) {
		t.Error("the name made before the namespace entered it no longer names the snapshot: every pinned workload would roll")
	}
	if Names(h, guess, Name(h, theirs)) {
		t.Error("another namespace's name matches")
	}
}

func TestApplyAndSourceSpecAreInverse(t *testing.T) {
	tmpl := &corev1.PodTemplateSpec{Spec: corev1.PodSpec{
		Volumes: []corev1.Volume{
			{Name: "v", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}},
			{Name: "s", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "db"}}},
			{Name: "p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}},
				{Secret: &corev1.SecretProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "other"}}}}}}},
		},
		InitContainers: []corev1.Container{{Name: "i", EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}},
		Containers: []corev1.Container{{Name: "c", Env: []corev1.EnvVar{{Name: "E", ValueFrom: &corev1.EnvVarSource{
			SecretKeyRef: &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "db"}, Key: "k"}}}}}},
		ImagePullSecrets: []corev1.LocalObjectReference{{Name: "db"}},
	}}
	source := tmpl.DeepCopy()
	pins := Pins{{Kind: stamp.KindConfigMap, Name: "cfg"}: "cfg-0123456789", {Kind: stamp.KindSecret, Name: "db"}: "db-abcdefabcd"}
	Apply(tmpl, pins)
	refs := stamp.NewRefs()
	stamp.AddTemplateRefs(refs, &tmpl.Spec)
	want := []string{"ConfigMap/cfg-0123456789", "Secret/db-abcdefabcd", "Secret/other"}
	if got := refs.IndexValues(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("pinned template references %v, want %v", got, want)
	}
	if tmpl.Spec.ImagePullSecrets[0].Name != "db" {
		t.Error("an imagePullSecret was pinned; nothing mounts it")
	}
	if got := Pinned(tmpl); len(got) != 2 || got[stamp.ObjectRef{Kind: stamp.KindSecret, Name: "db"}] != "db-abcdefabcd" {
		t.Errorf("Pinned = %v, want the pins applied", got)
	}
	back := SourceSpec(tmpl)
	src := stamp.NewRefs()
	stamp.AddTemplateRefs(src, back)
	want0 := stamp.NewRefs()
	stamp.AddTemplateRefs(want0, &source.Spec)
	if strings.Join(src.IndexValues(), " ") != strings.Join(want0.IndexValues(), " ") {
		t.Errorf("source view references %v, want the author's %v", src.IndexValues(), want0.IndexValues())
	}
	Apply(tmpl, nil) // unpin: needs a source view first
	if _, ok := tmpl.Annotations[AnnotationPinned]; ok {
		t.Error("unpinning left the annotation")
	}
}

func TestPinnedToleratesHandEdits(t *testing.T) {
	tmpl := &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{
		AnnotationPinned: "ConfigMap/cfg-1=cfg,garbage,Pod/x=y,Secret/s-1=,ConfigMap/=z,Secret/db-2=db"}}}
	got := Pinned(tmpl)
	if len(got) != 2 || got[stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "cfg"}] != "cfg-1" || got[stamp.ObjectRef{Kind: stamp.KindSecret, Name: "db"}] != "db-2" {
		t.Errorf("Pinned = %v, want only the two well-formed items", got)
	}
}

func TestSnapshotAndSame(t *testing.T) {
	src := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: strings.Repeat("n", 100)}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{"tls.crt": []byte("c"), "tls.key": []byte("k")}}
	snap := Snapshot(src, "x-0123456789").(*corev1.Secret)
	if snap.Type != corev1.SecretTypeTLS || !*snap.Immutable || string(snap.Data["tls.key"]) != "k" || snap.Namespace != "ns" {
		t.Errorf("snapshot %+v does not copy the Secret", snap)
	}
	if _, ok := snap.Labels[SnapshotOf]; ok || snap.Annotations[SnapshotOf] != src.Name {
		t.Errorf("a 100-character source name must be in the annotation only: labels %v", snap.Labels)
	}
	if !Same(snap.DeepCopy(), snap) {
		t.Error("a snapshot is not the same as itself")
	}
	forged := snap.DeepCopy()
	forged.Data["tls.key"] = []byte("other")
	if Same(forged, snap) {
		t.Error("other data under the snapshot's name and labels counts as configstamp's snapshot")
	}
	mutable := snap.DeepCopy()
	mutable.Immutable = nil
	if Same(mutable, snap) {
		t.Error("a mutable object counts as a snapshot")
	}
	if Pinnable(&corev1.Secret{Type: corev1.SecretTypeServiceAccountToken}) {
		t.Error("a service-account token Secret is pinnable")
	}
}

func TestWanted(t *testing.T) {
	for _, c := range []struct {
		workload, namespace string
		want                bool
		problems            int
	}{{"true", "", true, 0}, {"", "true", true, 0}, {"false", "true", false, 0}, {"yes", "true", true, 1}, {"", "", false, 0}} {
		w, n := map[string]string{}, map[string]string{}
		if c.workload != "" {
			w[AnnotationPin] = c.workload
		}
		if c.namespace != "" {
			n[AnnotationPin] = c.namespace
		}
		got, problems := Wanted(w, n)
		if got != c.want || len(problems) != c.problems {
			t.Errorf("Wanted(%q, %q) = %v, %d problems; want %v, %d", c.workload, c.namespace, got, len(problems), c.want, c.problems)
		}
	}
}
