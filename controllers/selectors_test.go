package controllers

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
)

// TestSelectorWarner: a ConfigMap whose rollout selector does not parse gets
// one InvalidValue Warning event naming the value; a valid selector, or a
// ConfigMap gone, none.
func TestSelectorWarner(t *testing.T) {
	cm := func(name, selector string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name,
			Annotations: map[string]string{stamp.AnnotationRolloutSelector: selector}}}
	}
	c := fake.NewClientBuilder().WithObjects(cm("bad", "app in ("), cm("good", "app=web")).Build()
	rec := events.NewFakeRecorder(10)
	w := &SelectorWarner{Kind: stamp.KindConfigMap, Cache: c, APIReader: c, Recorder: rec}
	for _, name := range []string{"bad", "good", "gone"} {
		if _, err := w.Reconcile(t.Context(), reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	close(rec.Events)
	var got []string
	for e := range rec.Events {
		got = append(got, e)
	}
	if len(got) != 1 || !strings.Contains(got[0], "Warning "+workload.ReasonInvalidValue) || !strings.Contains(got[0], "app in (") {
		t.Fatalf("events %q, want one InvalidValue about the bad selector", got)
	}
}
