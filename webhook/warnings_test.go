package webhook

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
	"github.com/configstamp/configstamp/controllers/workload/kindstest"
)

func warnDeployment(name string, optIn bool, env ...corev1.EnvVar) *appsv1.Deployment {
	d := &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
	if optIn {
		d.Labels = map[string]string{stamp.LabelEnabled: "true"}
	}
	d.Spec.Template.Labels = map[string]string{"app": name}
	d.Spec.Template.Spec.Containers = []corev1.Container{{Name: "app", Env: env}}
	return d
}

func cmKey(name, key string) corev1.EnvVar {
	return corev1.EnvVar{Name: "X", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}}}
}

func warner(t *testing.T, objs ...client.Object) *ChangeWarner {
	t.Helper()
	return warnerFor(t, nil, objs...)
}

// warnerFor is warner for the workload kinds of kinds.
func warnerFor(t *testing.T, kinds *workload.Registry, objs ...client.Object) *ChangeWarner {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	b := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithObjects(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}})
	for _, k := range kinds.All() {
		b = b.WithIndex(k.New(), workload.IndexSources, func(o client.Object) []string {
			tmpl := k.PodTemplate(o)
			if tmpl == nil {
				return nil
			}
			refs, _ := stamp.WorkloadRefs(o.GetAnnotations(), &tmpl.Spec)
			return refs.IndexValues()
		})
	}
	b = b.WithIndex(&corev1.ConfigMap{}, workload.IndexHasSelector, workload.IndexHasSelectorFunc).
		WithIndex(&corev1.Secret{}, workload.IndexHasSelector, workload.IndexHasSelectorFunc)
	scope, err := workload.NewScope("configstamp-system", nil, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	return &ChangeWarner{Cache: b.Build(), Scope: scope, Kinds: kinds}
}

func update(t *testing.T, kind string, old, obj any) admission.Request {
	t.Helper()
	raw := func(o any) []byte {
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		Operation: admissionv1.Update, Namespace: "ns", Kind: metav1.GroupVersionKind{Version: "v1", Kind: kind},
		Object: runtime.RawExtension{Raw: raw(obj)}, OldObject: runtime.RawExtension{Raw: raw(old)}}}
}

func configMap(data map[string]string, annotations map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "cfg", Annotations: annotations}, Data: data}
}

func TestChangeWarner(t *testing.T) {
	many := []client.Object{}
	for i := range 12 {
		many = append(many, warnDeployment(fmt.Sprintf("w%02d", i), true, cmKey("cfg", "a")))
	}
	tests := map[string]struct {
		objs     []client.Object
		old, new *corev1.ConfigMap
		want     string
	}{
		"a referenced key changes": {
			objs: []client.Object{warnDeployment("a", true, cmKey("cfg", "a")), warnDeployment("b", true, cmKey("cfg", "b"))},
			old:  configMap(map[string]string{"a": "1", "b": "1"}, nil), new: configMap(map[string]string{"a": "2", "b": "1"}, nil),
			want: "configstamp: this change rolls 1 workload: deployment/a",
		},
		"only an unreferenced key changes": {
			objs: []client.Object{warnDeployment("a", true, cmKey("cfg", "a"))},
			old:  configMap(map[string]string{"a": "1", "b": "1"}, nil), new: configMap(map[string]string{"a": "1", "b": "2"}, nil),
		},
		"not opted in": {
			objs: []client.Object{warnDeployment("a", false, cmKey("cfg", "a"))},
			old:  configMap(map[string]string{"a": "1"}, nil), new: configMap(map[string]string{"a": "2"}, nil),
		},
		"selected by its rollout selector, not opted in": {
			objs: []client.Object{warnDeployment("a", false), warnDeployment("b", false)},
			old:  configMap(map[string]string{"a": "1"}, map[string]string{stamp.AnnotationRolloutSelector: "app=a"}),
			new:  configMap(map[string]string{"a": "2"}, map[string]string{stamp.AnnotationRolloutSelector: "app=a"}),
			want: "configstamp: this change rolls 1 workload: deployment/a",
		},
		"its selector lets go of a workload another object's selector keeps": {
			// Still configstamp's after the change, and no longer referencing
			// cfg: its stamp changes (as kubectl configstamp plan says).
			objs: []client.Object{warnDeployment("a", false),
				&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "other",
					Annotations: map[string]string{stamp.AnnotationRolloutSelector: "app=a"}}}},
			old:  configMap(map[string]string{"a": "1"}, map[string]string{stamp.AnnotationRolloutSelector: "app=a"}),
			new:  configMap(map[string]string{"a": "1"}, map[string]string{stamp.AnnotationRolloutSelector: "app=b"}),
			want: "configstamp: this change rolls 1 workload: deployment/a",
		},
		"its selector brings in a workload nothing else handles": {
			objs: []client.Object{warnDeployment("a", false)},
			old:  configMap(map[string]string{"a": "1"}, nil),
			new:  configMap(map[string]string{"a": "2"}, map[string]string{stamp.AnnotationRolloutSelector: "app=a"}),
		},
		"capped at ten names": {
			objs: many,
			old:  configMap(map[string]string{"a": "1"}, nil), new: configMap(map[string]string{"a": "2"}, nil),
			want: "configstamp: this change rolls 12 workloads: deployment/w00, deployment/w01, deployment/w02, deployment/w03, " +
				"deployment/w04, deployment/w05, deployment/w06, deployment/w07, deployment/w08, deployment/w09 and 2 more",
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			resp := warner(t, tc.objs...).Handle(t.Context(), update(t, "ConfigMap", tc.old, tc.new))
			if !resp.Allowed {
				t.Fatalf("denied: %v", resp.Result)
			}
			got := strings.Join(resp.Warnings, "\n")
			if got != tc.want {
				t.Fatalf("warnings %q, want %q", got, tc.want)
			}
		})
	}
}

func TestChangeWarnerSecretRevealsNothing(t *testing.T) {
	d := warnDeployment("app", true, corev1.EnvVar{Name: "P", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
		LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}, Key: "password"}}})
	sec := func(v string) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "creds"}, Data: map[string][]byte{"password": []byte(v)}}
	}
	resp := warner(t, d).Handle(t.Context(), update(t, "Secret", sec("hunter2"), sec("correct-horse")))
	got := strings.Join(resp.Warnings, "\n")
	if !resp.Allowed || got != "configstamp: this change rolls 1 workload: deployment/app" {
		t.Fatalf("allowed %v, warnings %q", resp.Allowed, got)
	}
	for _, secret := range []string{"hunter2", "correct-horse", "password", "creds"} {
		if strings.Contains(got, secret) {
			t.Fatalf("the warning names %q: %s", secret, got)
		}
	}
}

// A ConfigMap with a rollout selector makes the warner look at every workload
// of the namespace, those of the extra kinds too: one without a template (an
// Argo Rollout with workloadRef) is skipped, not a failure of the webhook.
func TestChangeWarnerSkipsTemplateLessObjects(t *testing.T) {
	kinds := kindstest.Registry(t, `kinds: [{group: argoproj.io, version: v1alpha1, kind: Rollout, resource: rollouts, templatePath: spec.template}]`)
	ref := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{
		"workloadRef": map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "a"}}}}
	ref.SetAPIVersion("argoproj.io/v1alpha1")
	ref.SetKind("Rollout")
	ref.SetNamespace("ns")
	ref.SetName("r")
	sel := map[string]string{stamp.AnnotationRolloutSelector: "app=a"}
	resp := warnerFor(t, kinds, warnDeployment("a", false), ref).Handle(t.Context(),
		update(t, "ConfigMap", configMap(map[string]string{"a": "1"}, sel), configMap(map[string]string{"a": "2"}, sel)))
	if got := strings.Join(resp.Warnings, "\n"); !resp.Allowed || got != "configstamp: this change rolls 1 workload: deployment/a" {
		t.Fatalf("allowed %v (%v), warnings %q", resp.Allowed, resp.Result, got)
	}
}
