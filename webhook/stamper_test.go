package webhook

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/configstamp/configstamp/controllers/pin"
	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/controllers/workload"
	"github.com/configstamp/configstamp/webhook/live"
)

const ns = "apps"

func newHandler(t *testing.T, objs ...client.Object) (admission.Handler, *stamp.Hasher) {
	t.Helper()
	return newHandlerReading(t, func(c client.Reader) client.Reader { return c }, objs...)
}

// newHandlerReading is newHandler with the live reads going through sources(c).
func newHandlerReading(t *testing.T, sources func(client.Reader) client.Reader, objs ...client.Object) (admission.Handler, *stamp.Hasher) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	objs = append(objs, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).
		WithIndex(&corev1.ConfigMap{}, workload.IndexHasSelector, workload.IndexHasSelectorFunc).
		WithIndex(&corev1.Secret{}, workload.IndexHasSelector, workload.IndexHasSelectorFunc).
		Build()
	keys := stamp.NewKeyring([]byte("0123456789abcdef0123456789abcdef"))
	hasher := keys.Current()
	resolver := &workload.Resolver{Sources: sources(c), Index: c, Keys: keys, Parallel: true}
	return withWarnings{Handlers(scheme, &Stamper{Resolver: resolver, Cache: c, Decoder: admission.NewDecoder(scheme)})}, hasher
}

func deployment(labels, annotations map[string]string, templateAnnotations map[string]string) *appsv1.Deployment {
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web", Labels: labels, Annotations: annotations},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}, Annotations: templateAnnotations},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "img:1",
					EnvFrom: []corev1.EnvFromSource{{ConfigMapRef: &corev1.ConfigMapEnvSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: "cfg"}}}}}}},
			},
		},
	}
}

func request(t *testing.T, op admissionv1.Operation, obj, old *appsv1.Deployment) admission.Request {
	t.Helper()
	raw := func(o *appsv1.Deployment) runtime.RawExtension {
		if o == nil {
			return runtime.RawExtension{}
		}
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		return runtime.RawExtension{Raw: b}
	}
	return admission.Request{AdmissionRequest: admissionv1.AdmissionRequest{
		UID: "1", Operation: op, Namespace: ns, Name: "web",
		Kind:   metav1.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"},
		Object: raw(obj), OldObject: raw(old), DryRun: ptr.To(false),
	}}
}

// patched applies the response's JSON patch paths of interest and returns the
// values the patch sets, keyed by JSON pointer.
func patchValues(resp admission.Response) map[string]any {
	out := map[string]any{}
	for _, p := range resp.Patches {
		out[p.Path] = p.Value
	}
	return out
}

const (
	tmplHashPath = "/spec/template/metadata/annotations/configstamp.io~1config-hash"
	tmplAnnPath  = "/spec/template/metadata/annotations"
)

// stampOf returns the template stamp set by a response, however the patch put it.
func stampOf(resp admission.Response) string {
	v := patchValues(resp)
	if s, ok := v[tmplHashPath].(string); ok {
		return s
	}
	if m, ok := v[tmplAnnPath].(map[string]any); ok {
		s, _ := m[stamp.AnnotationHash].(string)
		return s
	}
	return ""
}

func TestCreateStamps(t *testing.T) {
	cfg := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cfg"}, Data: map[string]string{"k": "v"}}
	h, _ := newHandler(t, cfg)
	resp := h.Handle(t.Context(), request(t, admissionv1.Create, deployment(map[string]string{stamp.LabelEnabled: "true"}, nil, nil), nil))
	if !resp.Allowed {
		t.Fatalf("not allowed: %v", resp.Result)
	}
	if s := stampOf(resp); !strings.HasPrefix(s, "v1-") {
		t.Fatalf("CREATE stamp = %q (patches %v)", s, resp.Patches)
	}
}

// arrivals records, for each live read, whether its context carries the
// admission's arrival (live.Arrive): without it no read is shared.
type arrivals struct {
	client.Reader
	mu     sync.Mutex
	marked []bool
}

func (a *arrivals) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	a.mu.Lock()
	a.marked = append(a.marked, live.Arrived(ctx))
	a.mu.Unlock()
	return a.Reader.Get(ctx, key, obj, opts...)
}

// TestReadsCarryTheArrival: the webhook marks each admission's arrival before
// it reads, so that concurrent admissions may share reads sent after it.
func TestReadsCarryTheArrival(t *testing.T) {
	cfg := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cfg"}, Data: map[string]string{"k": "v"}}
	rec := &arrivals{}
	h, _ := newHandlerReading(t, func(c client.Reader) client.Reader { rec.Reader = c; return rec }, cfg)
	resp := h.Handle(t.Context(), request(t, admissionv1.Create, deployment(map[string]string{stamp.LabelEnabled: "true"}, nil, nil), nil))
	if s := stampOf(resp); !strings.HasPrefix(s, "v1-") {
		t.Fatalf("CREATE stamp = %q (patches %v)", s, resp.Patches)
	}
	if len(rec.marked) != 1 || !rec.marked[0] {
		t.Fatalf("live reads marked with the arrival: %v, want [true]", rec.marked)
	}
}

func TestNotOptedInIsUntouched(t *testing.T) {
	h, _ := newHandler(t)
	for name, labels := range map[string]map[string]string{
		"no label":  nil,
		"false":     {stamp.LabelEnabled: "false"},
		"malformed": {stamp.LabelEnabled: "yes"},
	} {
		t.Run(name, func(t *testing.T) {
			resp := h.Handle(t.Context(), request(t, admissionv1.Create, deployment(labels, nil, nil), nil))
			if !resp.Allowed || len(resp.Patches) != 0 {
				t.Fatalf("allowed %v patches %v", resp.Allowed, resp.Patches)
			}
			if name == "malformed" && (len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], `"yes"`)) {
				t.Fatalf("warnings %q, want one naming the value", resp.Warnings)
			}
		})
	}
}

func TestUpdate(t *testing.T) {
	cfg := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cfg"}, Data: map[string]string{"k": "v"}}
	h, _ := newHandler(t, cfg)
	on := map[string]string{stamp.LabelEnabled: "true"}
	created := h.Handle(t.Context(), request(t, admissionv1.Create, deployment(on, nil, nil), nil))
	good := stampOf(created)
	stamped := deployment(on, map[string]string{stamp.AnnotationAppliedHash: good}, map[string]string{stamp.AnnotationHash: good})

	tests := map[string]struct {
		obj       *appsv1.Deployment
		wantStamp string // "" = the patch sets no stamp
	}{
		"unchanged": {obj: stamped.DeepCopy()},
		"stamp dropped by a re-applied manifest": {
			obj:       deployment(on, nil, nil),
			wantStamp: good,
		},
		"stale stamp proposed (lagging cache) is corrected": {
			obj:       deployment(on, nil, map[string]string{stamp.AnnotationHash: "v1-00000000000000000000000000000000"}),
			wantStamp: good,
		},
		"template change gets the stamp": {
			obj: func() *appsv1.Deployment {
				d := deployment(on, nil, nil)
				d.Spec.Template.Spec.Containers[0].Image = "img:2"
				return d
			}(),
			wantStamp: good,
		},
		"scale keeps the template": {
			obj: func() *appsv1.Deployment {
				d := stamped.DeepCopy()
				d.Spec.Replicas = ptr.To[int32](5)
				return d
			}(),
		},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			resp := h.Handle(t.Context(), request(t, admissionv1.Update, tc.obj, stamped))
			if !resp.Allowed {
				t.Fatalf("not allowed: %v", resp.Result)
			}
			if got := stampOf(resp); got != tc.wantStamp {
				t.Fatalf("stamp set by patch = %q, want %q (patches %v)", got, tc.wantStamp, resp.Patches)
			}
		})
	}
}

func TestBadAnnotationWarnsAndStillStamps(t *testing.T) {
	h, _ := newHandler(t)
	d := deployment(map[string]string{stamp.LabelEnabled: "true"}, map[string]string{stamp.AnnotationExtraSecrets: "UPPER"}, nil)
	resp := h.Handle(t.Context(), request(t, admissionv1.Create, d, nil))
	if !resp.Allowed || stampOf(resp) == "" {
		t.Fatalf("allowed %v stamp %q", resp.Allowed, stampOf(resp))
	}
	if len(resp.Warnings) != 1 || !strings.Contains(resp.Warnings[0], "UPPER") {
		t.Fatalf("warnings = %q", resp.Warnings)
	}
}

// TestUnpinnedWithoutPin: an installation that runs without --pin puts the
// sources back in a pinned template at its next admission (here configstamp's
// own rollout patch), so that the rollout reads the new data instead of
// keeping the old snapshot.
func TestUnpinnedWithoutPin(t *testing.T) {
	h, hasher := newHandler(t, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "cfg"}, Data: map[string]string{"k": "v2"}})
	old := deployment(map[string]string{stamp.LabelEnabled: "true"}, map[string]string{pin.AnnotationPin: "true"},
		map[string]string{stamp.AnnotationHash: "v1-old", pin.AnnotationPinned: "ConfigMap/cfg-0123456789=cfg"})
	old.Spec.Template.Spec.Containers[0].EnvFrom[0].ConfigMapRef.Name = "cfg-0123456789"
	old.Spec.Template.Labels[pin.LabelPinned] = "true"
	obj := old.DeepCopy()
	obj.Spec.Template.Annotations[stamp.AnnotationHash] = "v1-proposed"
	resp := h.Handle(t.Context(), request(t, admissionv1.Update, obj, old))
	if !resp.Allowed {
		t.Fatalf("not allowed: %v", resp.Result)
	}
	got := applyPatch(t, obj, resp)
	tmpl := got.Spec.Template
	if name := tmpl.Spec.Containers[0].EnvFrom[0].ConfigMapRef.Name; name != "cfg" || tmpl.Annotations[pin.AnnotationPinned] != "" || tmpl.Labels[pin.LabelPinned] != "" {
		t.Errorf("without --pin the template kept its pin: envFrom %s, annotations %v, labels %v", name, tmpl.Annotations, tmpl.Labels)
	}
	refs := stamp.NewRefs()
	stamp.AddTemplateRefs(refs, &tmpl.Spec)
	want := hasher.Compute(ns, refs, map[stamp.ObjectRef]stamp.Source{
		{Kind: stamp.KindConfigMap, Name: "cfg"}: stamp.SourceFromConfigMap(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cfg"}, Data: map[string]string{"k": "v2"}})}).Hash
	if tmpl.Annotations[stamp.AnnotationHash] != want {
		t.Errorf("stamp %s, want the current data's %s", tmpl.Annotations[stamp.AnnotationHash], want)
	}
	if !strings.Contains(strings.Join(resp.Warnings, " "), "does not pin") {
		t.Errorf("warnings %q: want the installation said not to pin", resp.Warnings)
	}
}

// applyPatch returns obj with the response's JSON patch applied.
func applyPatch(t *testing.T, obj *appsv1.Deployment, resp admission.Response) *appsv1.Deployment {
	t.Helper()
	raw, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	ops, err := json.Marshal(resp.Patches)
	if err != nil {
		t.Fatal(err)
	}
	patch, err := jsonpatch.DecodePatch(ops)
	if err != nil {
		t.Fatal(err)
	}
	if raw, err = patch.Apply(raw); err != nil {
		t.Fatal(err)
	}
	out := &appsv1.Deployment{}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatal(err)
	}
	return out
}
