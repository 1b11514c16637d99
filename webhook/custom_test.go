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
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
	"github.com/configstamp/configstamp/controllers/workload/kindstest"
)

// An extra kind is stamped at its template path, and the patch touches only
// configstamp's annotations: the template is never rewritten through a typed
// round trip (which would add fields the CRD's schema does not know).
func TestCustomKindStampedAtItsPath(t *testing.T) {
	kinds := kindstest.Registry(t, `
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
	// Pinned (--pin on): the snapshot is made and the template's volume names
	// it, written back at its path like the stamp.
	h := withWarnings{Handlers(scheme, &Stamper{Resolver: resolver, Cache: c, Decoder: admission.NewDecoder(scheme),
		Snapshots: &pin.Snapshots{Reader: c, Writer: c}, Kinds: kinds})}

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
			u.SetAnnotations(map[string]string{pin.AnnotationPin: "true"})
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
			volume := "/" + strings.Join(tc.path, "/") + "/spec/volumes/0/configMap/name"
			var stamped, mounted string
			for _, p := range resp.Patches {
				switch p.Path {
				case at:
					stamped, _ = p.Value.(map[string]any)[stamp.AnnotationHash].(string)
				case volume:
					mounted, _ = p.Value.(string)
				case "/" + strings.Join(tc.path, "/") + "/metadata/labels/" + strings.ReplaceAll(pin.LabelPinned, "/", "~1"):
				default:
					if !strings.HasPrefix(p.Path, "/metadata/annotations") {
						t.Errorf("patch touches %s (%v): only annotations, the pinned label and the volume's name may change", p.Path, p.Value)
					}
				}
			}
			if !strings.HasPrefix(mounted, "cfg-") {
				t.Errorf("the pinned %s mounts %q, want a snapshot of cfg (patches %v)", tc.gvk.Kind, mounted, resp.Patches)
			}
			if !strings.HasPrefix(stamped, "v1-") {
				t.Fatalf("no stamp at %s: patches %v", at, resp.Patches)
			}
			snap := &corev1.ConfigMap{}
			if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: mounted}, snap); err != nil || snap.Data["k"] != "v" {
				t.Errorf("the snapshot %s: %v %v", mounted, err, snap.Data)
			}
		})
	}
}

// Extra-kind objects without a template, or with a null template metadata,
// never make the webhook fail: an UPDATE from an Argo Rollout with
// workloadRef to one with its own template is stamped, a null metadata gets
// the stamp, and a template-less object is admitted untouched.
func TestCustomKindOddTemplates(t *testing.T) {
	kinds := kindstest.Registry(t, `
kinds:
  - {group: argoproj.io, version: v1alpha1, kind: Rollout, resource: rollouts, templatePath: spec.template}
`)
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}).
		WithIndex(&corev1.ConfigMap{}, workload.IndexHasSelector, workload.IndexHasSelectorFunc).
		WithIndex(&corev1.Secret{}, workload.IndexHasSelector, workload.IndexHasSelectorFunc).Build()
	resolver := &workload.Resolver{Sources: c, Index: c, Keys: stamp.NewKeyring([]byte("0123456789abcdef0123456789abcdef"))}
	h := withWarnings{Handlers(scheme, &Stamper{Resolver: resolver, Cache: c, Decoder: admission.NewDecoder(scheme), Kinds: kinds})}
	raw := func(spec map[string]any) []byte {
		b, err := json.Marshal(map[string]any{"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
			"metadata": map[string]any{"namespace": ns, "name": "r", "labels": map[string]any{stamp.LabelEnabled: "true"}}, "spec": spec})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	podSpec := map[string]any{"containers": []any{map[string]any{"name": "c", "image": "c:1"}}}
	withRef := raw(map[string]any{"workloadRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "x"}})
	handle := func(op admissionv1.Operation, obj, old []byte) admission.Response {
		req := admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{UID: "1", Operation: op, Namespace: ns, Name: "r",
			Kind:   metav1.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "Rollout"},
			Object: runtime.RawExtension{Raw: obj}, OldObject: runtime.RawExtension{Raw: old}, DryRun: ptr.To(false)}}
		resp := h.Handle(t.Context(), req)
		if !resp.Allowed || (resp.Result != nil && resp.Result.Code >= 400) {
			t.Fatalf("%s: not admitted cleanly: %+v", op, resp.Result)
		}
		return resp
	}
	stampAt := func(resp admission.Response) string {
		for _, p := range resp.Patches {
			if m, ok := p.Value.(map[string]any); ok && strings.HasPrefix(p.Path, "/spec/template/metadata") {
				if s, ok := m[stamp.AnnotationHash].(string); ok {
					return s
				}
				if a, ok := m["annotations"].(map[string]any); ok {
					s, _ := a[stamp.AnnotationHash].(string)
					return s
				}
			}
		}
		return ""
	}
	if resp := handle(admissionv1.Create, withRef, nil); len(resp.Patches) != 0 {
		t.Errorf("a Rollout with workloadRef was patched: %v", resp.Patches)
	}
	if s := stampAt(handle(admissionv1.Update, raw(map[string]any{"template": map[string]any{"spec": podSpec}}), withRef)); !strings.HasPrefix(s, "v1-") {
		t.Errorf("workloadRef → template UPDATE: stamp %q", s)
	}
	if s := stampAt(handle(admissionv1.Create, raw(map[string]any{"template": map[string]any{"metadata": nil, "spec": podSpec}}), nil)); !strings.HasPrefix(s, "v1-") {
		t.Errorf("null template metadata: stamp %q", s)
	}
}
