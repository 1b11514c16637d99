package workload

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/configstamp/configstamp/controllers/stamp"
)

func TestChangeRolls(t *testing.T) {
	ref := stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "cfg"}
	keyA := corev1.EnvVar{Name: "A", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}, Key: "a"}}}
	selector := map[string]string{stamp.AnnotationRolloutSelector: "app=web"}
	cm := func(data map[string]string, ann map[string]string) (stamp.Source, map[string]string) {
		return stamp.SourceFromConfigMap(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg", Annotations: ann}, Data: data}), ann
	}
	tests := map[string]struct {
		env                 []corev1.EnvVar
		before, after       map[string]string
		annBefore, annAfter map[string]string
		rolls, selected     bool
	}{
		"referenced key":        {env: []corev1.EnvVar{keyA}, before: map[string]string{"a": "1"}, after: map[string]string{"a": "2"}, rolls: true},
		"unreferenced key":      {env: []corev1.EnvVar{keyA}, before: map[string]string{"a": "1", "b": "1"}, after: map[string]string{"a": "1", "b": "2"}},
		"not referenced at all": {before: map[string]string{"a": "1"}, after: map[string]string{"a": "2"}},
		"metadata only":         {env: []corev1.EnvVar{keyA}, before: map[string]string{"a": "1"}, after: map[string]string{"a": "1"}, annAfter: map[string]string{"x": "y"}},
		"selected: any key":     {before: map[string]string{"b": "1"}, after: map[string]string{"b": "2"}, annBefore: selector, annAfter: selector, rolls: true, selected: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			tmpl := &corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Env: tc.env}}}}
			before, annBefore := cm(tc.before, tc.annBefore)
			after, annAfter := cm(tc.after, tc.annAfter)
			refsBefore, selBefore := ReferencesTo(nil, tmpl, ref, annBefore)
			refsAfter, selAfter := ReferencesTo(nil, tmpl, ref, annAfter)
			if selBefore != tc.selected || selAfter != tc.selected {
				t.Fatalf("selected %v/%v, want %v", selBefore, selAfter, tc.selected)
			}
			if got := ChangeRolls("ns", ref, refsBefore, refsAfter, before, after); got != tc.rolls {
				t.Fatalf("ChangeRolls = %v, want %v", got, tc.rolls)
			}
		})
	}
}

// ChangeContent tells changes apart as rollout.Causes does, key-precise:
// workloads referencing the same keys roll one change, others another.
func TestChangeContent(t *testing.T) {
	ref := stamp.ObjectRef{Kind: stamp.KindConfigMap, Name: "cfg"}
	src := stamp.SourceFromConfigMap(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"a": "1", "b": "2"}})
	keys := func(ks ...string) *stamp.Refs {
		r := stamp.NewRefs()
		for _, k := range ks {
			r.AddKey(ref, k)
		}
		return r
	}
	all := stamp.NewRefs()
	all.AddAll(ref)
	a, a2, ab, b := ChangeContent("ns", ref, keys("a"), src), ChangeContent("ns", ref, keys("a"), src), ChangeContent("ns", ref, keys("a", "b"), src), ChangeContent("ns", ref, keys("b"), src)
	if a != a2 || a == ab || a == b || ab == b || a == "" {
		t.Errorf("a %s, a again %s, a and b %s, b %s: want one change per set of keys", a, a2, ab, b)
	}
	if ChangeContent("other", ref, keys("a"), src) == a {
		t.Error("the same keys in another namespace: want another change")
	}
	ignored := src
	ignored.Ignored = true
	if got := ChangeContent("ns", ref, all, ignored); got != "unreferenced" {
		t.Errorf("ignored: %q", got)
	}
}
