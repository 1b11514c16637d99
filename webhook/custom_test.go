package webhook

import (
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
	"github.com/configstamp/configstamp/controllers/workload/kindstest"
)

// An extra kind is stamped at its template path, and the patch touches only
// configstamp's annotations: the template is never rewritten through a typed
// round trip (which would add fields the CRD's schema does not know).
func TestCustomKindStampedAtItsPath(t *testing.T) {
	kindstest.Register(t, `
kinds:
  - {group: argoproj.io, version: v1alpha1, kind: Rollout, resource: rollouts, templatePath: spec.template}
  - {group: example.com, version: v1, kind: Job2, resource: job2s, templatePath: spec.run.podTemplate}
`)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	cfgMap := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cfg"}, Data: map[string]string{"k": "v"}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(cfgMap, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}).
		WithIndex(&corev1.ConfigMap{}, workload.IndexHasSelector, workload.IndexHasSelectorFunc).
		WithIndex(&corev1.Secret{}, workload.IndexHasSelector, workload.IndexHasSelectorFunc).Build()
	keys := stamp.NewKeyring([]byte("0123456789abcdef0123456789abcdef"))
	resolver := &workload.Resolver{Sources: c, Index: c, Keys: keys}
	custom := admission.WithDefaulter(scheme, &Stamper[*unstructured.Unstructured]{Resolver: resolver, Cache: c, Decoder: admission.NewDecoder(scheme)}).Handler
	h := withWarnings{byKind{{Group: "argoproj.io", Kind: "Rollout"}: custom, {Group: "example.com", Kind: "Job2"}: custom}}

	template := map[string]any{
		"metadata": map[string]any{"labels": map[string]any{"app": "web"}},
		"spec": map[string]any{
			"containers": []any{map[string]any{"name": "app", "image": "app:1", "unknownToCoreV1": "kept"}},
			"volumes":    []any{map[string]any{"name": "cfg", "configMap": map[string]any{"name": "cfg"}}},
		},
	}
	for _, tc := range []struct {
		gvk  schema.GroupVersionKind
		path []string
	}{
		{schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "Rollout"}, []string{"spec", "template"}},
		{schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Job2"}, []string{"spec", "run", "podTemplate"}},
	} {
		t.Run(tc.gvk.Kind, func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{}}
			u.SetGroupVersionKind(tc.gvk)
			u.SetNamespace(ns)
			u.SetName("web")
			u.SetLabels(map[string]string{stamp.LabelEnabled: "true"})
			if err := unstructured.SetNestedField(u.Object, runtime.DeepCopyJSONValue(template), tc.path...); err != nil {
				t.Fatal(err)
			}
			raw, err := json.Marshal(u.Object)
			if err != nil {
				t.Fatal(err)
			}
			resp := h.Handle(t.Context(), admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
				UID: "1", Operation: admissionv1.Create, Namespace: ns, Name: "web",
				Kind:   metav1.GroupVersionKind{Group: tc.gvk.Group, Version: tc.gvk.Version, Kind: tc.gvk.Kind},
				Object: runtime.RawExtension{Raw: raw}, DryRun: ptr.To(false),
			}})
			if !resp.Allowed {
				t.Fatalf("not allowed: %v", resp.Result)
			}
			at := "/" + strings.Join(tc.path, "/") + "/metadata/annotations"
			var stamped string
			for _, p := range resp.Patches {
				switch p.Path {
				case at:
					stamped, _ = p.Value.(map[string]any)[stamp.AnnotationHash].(string)
				case "/metadata/annotations":
				default:
					t.Errorf("patch touches %s (%v): only annotations may change", p.Path, p.Value)
				}
			}
			if !strings.HasPrefix(stamped, "v1-") {
				t.Fatalf("no stamp at %s: patches %v", at, resp.Patches)
			}
		})
	}
}
