package workload

import (
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

const argo = `
kinds:
  - group: argoproj.io
    version: v1alpha1
    kind: Rollout
    resource: rollouts
    templatePath: spec.template
    progress: {observedGeneration: status.observedGeneration, phase: status.phase, completePhases: [Healthy], failedPhases: [Degraded]}
`

func TestParseKindsConfig(t *testing.T) {
	if got, err := ParseKindsConfig([]byte(argo)); err != nil || len(got) != 1 || got[0].Progress.Phase != "status.phase" {
		t.Fatalf("valid config: %v, %v", got, err)
	}
	for name, tc := range map[string]struct{ yaml, want string }{
		"unknown field":    {`kinds: [{group: a.io, version: v1, kind: K, resource: ks, templatePath: spec.template, podTemplate: x}]`, "unknown field"},
		"no resource":      {`kinds: [{group: a.io, version: v1, kind: K, templatePath: spec.template}]`, "resource is required"},
		"no group":         {`kinds: [{version: v1, kind: K, resource: ks, templatePath: spec.template}]`, "group is required"},
		"built-in kind":    {`kinds: [{group: a.io, version: v1, kind: Deployment, resource: deployments, templatePath: spec.template}]`, "already handled"},
		"twice":            {`kinds: [{group: a.io, version: v1, kind: K, resource: ks, templatePath: spec.template}, {group: b.io, version: v1, kind: K, resource: ks, templatePath: spec.template}]`, "already handled"},
		"bad path":         {`kinds: [{group: a.io, version: v1, kind: K, resource: ks, templatePath: "spec..template"}]`, "dotted field path"},
		"json path":        {`kinds: [{group: a.io, version: v1, kind: K, resource: ks, templatePath: "{.spec.template}"}]`, "dotted field path"},
		"phases, no phase": {`kinds: [{group: a.io, version: v1, kind: K, resource: ks, templatePath: spec.template, progress: {completePhases: [Ready]}}]`, "need progress.phase"},
		"phase, no values": {`kinds: [{group: a.io, version: v1, kind: K, resource: ks, templatePath: spec.template, progress: {phase: status.phase}}]`, "needs completePhases"},
		"bad resource":     {`kinds: [{group: a.io, version: v1, kind: K, resource: Ks, templatePath: spec.template}]`, "resource"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseKindsConfig([]byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// registerArgo returns the Rollout kind.
func registerArgo(t *testing.T) Kind {
	t.Helper()
	cfg, err := ParseKindsConfig([]byte(argo))
	if err != nil {
		t.Fatal(err)
	}
	return Custom(cfg[0])
}

func rolloutObject(t *testing.T) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1", "kind": "Rollout",
		"metadata": map[string]any{"name": "web", "namespace": "ns", "annotations": map[string]any{"configstamp.io/applied-hash": "v1-x"}},
		"spec": map[string]any{
			"replicas": int64(3),
			"strategy": map[string]any{"canary": map[string]any{"steps": []any{map[string]any{"setWeight": int64(20)}}}},
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"app": "web"}, "annotations": map[string]any{"other": "x"}},
				"spec": map[string]any{
					"containers": []any{map[string]any{"name": "app", "image": "app:1",
						"env": []any{map[string]any{"name": "A", "valueFrom": map[string]any{"configMapKeyRef": map[string]any{"name": "cfg", "key": "a"}}}}}},
					"volumes": []any{map[string]any{"name": "v", "secret": map[string]any{"secretName": "s"}}},
				},
			},
		},
		"status": map[string]any{"observedGeneration": "4", "phase": "Healthy", "canary": map[string]any{"weights": "big"}},
	}}
	return u
}

func TestCustomPodTemplate(t *testing.T) {
	k := registerArgo(t)
	u := rolloutObject(t)
	tmpl := k.PodTemplate(u)
	if tmpl == nil || tmpl.Labels["app"] != "web" || tmpl.Spec.Volumes[0].Secret.SecretName != "s" ||
		tmpl.Spec.Containers[0].Env[0].ValueFrom.ConfigMapKeyRef.Name != "cfg" {
		t.Fatalf("template = %+v", tmpl)
	}
	k.SetTemplateAnnotation(u, "configstamp.io/config-hash", "v1-abc")
	if got, _, _ := unstructured.NestedString(u.Object, "spec", "template", "metadata", "annotations", "configstamp.io/config-hash"); got != "v1-abc" {
		t.Fatalf("stamp at spec.template = %q", got)
	}
	if got, _, _ := unstructured.NestedString(u.Object, "spec", "template", "metadata", "annotations", "other"); got != "x" {
		t.Fatalf("other template annotations lost: %q", got)
	}
	// An object of an unregistered kind, or a template that is not an object, has none.
	other := rolloutObject(t)
	other.SetKind("Other")
	broken := rolloutObject(t)
	_ = unstructured.SetNestedField(broken.Object, "not an object", "spec", "template")
	for _, o := range []*unstructured.Unstructured{other, broken} {
		if k.PodTemplate(o) != nil {
			t.Fatalf("%s: a template where there is none", o.GetKind())
		}
	}
}

func TestSlimCustomKeepsWhatIsRead(t *testing.T) {
	k := registerArgo(t)
	u := rolloutObject(t)
	tmpl := k.PodTemplate(u)
	tmpl.Spec.Containers[0].Image = ""
	k.Slim(u, tmpl)
	if _, found, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "strategy"); found {
		t.Error("spec.strategy kept")
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "canary"); found {
		t.Error("status.canary kept")
	}
	if g, _, _ := unstructured.NestedString(u.Object, "status", "observedGeneration"); g != "4" {
		t.Errorf("status.observedGeneration = %q", g)
	}
	if p, _, _ := unstructured.NestedString(u.Object, "status", "phase"); p != "Healthy" {
		t.Errorf("status.phase = %q", p)
	}
	if u.GetAnnotations()["configstamp.io/applied-hash"] != "v1-x" || u.GetName() != "web" {
		t.Errorf("metadata lost: %v", u.Object["metadata"])
	}
	if tm := k.PodTemplate(u); tm == nil || tm.Spec.Containers[0].Env[0].ValueFrom.ConfigMapKeyRef.Name != "cfg" || tm.Spec.Containers[0].Image != "" {
		t.Errorf("template after slimming = %+v", tm)
	}
}

// TestRegistry: the built-in kinds come first, then the extra ones; Of finds
// a typed object's kind by its type and an extra kind's object by its group
// and kind; All hands out a copy, so no caller can change the registry; a nil
// registry holds the built-in kinds.
func TestRegistry(t *testing.T) {
	argo := registerArgo(t)
	r := NewRegistry(argo)
	all := r.All()
	if len(all) != 4 || all[0].Name != "Deployment" || all[3].Name != "Rollout" {
		t.Fatalf("kinds %v", all)
	}
	all[0] = argo
	if r.All()[0].Name != "Deployment" {
		t.Fatal("a caller changed the registry through All")
	}
	if k, ok := r.Of(&appsv1.StatefulSet{}); !ok || k.Name != "StatefulSet" {
		t.Fatalf("Of(StatefulSet) = %v, %v", k.Name, ok)
	}
	if k, ok := r.Of(rolloutObject(t)); !ok || k.Name != "Rollout" || k.PodTemplate(rolloutObject(t)) == nil {
		t.Fatalf("Of(Rollout) = %v, %v", k.Name, ok)
	}
	other := rolloutObject(t)
	other.SetKind("Other")
	if _, ok := r.Of(other); ok {
		t.Fatal("an object of a kind not in the registry has a kind")
	}
	if _, ok := NewRegistry().Of(rolloutObject(t)); ok {
		t.Fatal("a registry without the extra kind knows it")
	}
	var none *Registry
	if k, ok := none.Of(&appsv1.DaemonSet{}); !ok || k.Name != "DaemonSet" || len(none.All()) != 3 {
		t.Fatalf("a nil registry: Of(DaemonSet) = %v, %v; %d kinds", k.Name, ok, len(none.All()))
	}
}
