// Package integration runs configstamp (the real binary) against a real
// kube-apiserver and etcd. No controller-manager runs here, so generations and
// template stamps are what the tests look at; ReplicaSets and pods are the
// end-to-end suite's business.
package integration

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/webhook"
)

var env *framework.Env

func TestMain(m *testing.M) {
	// No controller-manager runs here, so no rollout ever completes: follow
	// none. The audit log counts configstamp's GETs (bounds_test.go), with the
	// apply-time warnings on (warnings_test.go; its last test restarts
	// configstamp without them).
	os.Exit(framework.Main(m, &env, framework.Config{
		AuditLog: true,
		Args:     []string{"--apply-warnings", "--max-concurrent-rollouts=0", "--halt-on-failure=false", "--debounce=0"},
	}))
}

func TestWebhookStampsOnCreate(t *testing.T) {
	ns := env.Namespace(t, "create", nil)
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "app-config")
	cm := framework.ConfigMap(ns, "app-config", map[string]string{"a": "1"}, nil)
	dep := framework.Deployment(ns, "app", framework.OptIn, spec)
	// One kubectl apply: the ConfigMap and the Deployment arrive milliseconds apart.
	env.Apply(t, cm, dep)

	got := &appsv1.Deployment{}
	got.Namespace, got.Name = ns, "app"
	env.Get(t, got)
	h := framework.TemplateHash(got)
	if !strings.HasPrefix(h, "v1-") {
		t.Fatalf("template stamp after CREATE = %q, want v1-…", h)
	}
	tmpl := framework.TemplateJSON(t, got)
	if got.Annotations[stamp.AnnotationAppliedHash] != h {
		t.Errorf("record %q != stamp %q", got.Annotations[stamp.AnnotationAppliedHash], h)
	}

	// The reconciler agrees with the webhook: once it has seen the workload
	// (an annotation wakes it after the create event), nothing changes.
	before := env.Configstamp.ReconcileCounts(t)
	env.Kubectl(t, "", "annotate", "-n", ns, "deployment/app", "example.com/touched=yes")
	env.Configstamp.WaitIdle(t, map[string]float64{"deployment": before["deployment"]})
	env.Get(t, got)
	if framework.TemplateJSON(t, got) != tmpl {
		t.Fatalf("the reconciler changed the template the webhook stamped:\n%s\n%s", tmpl, framework.TemplateJSON(t, got))
	}
}

func TestUpdateWithoutStampGetsItBack(t *testing.T) {
	_, dep := env.MountingApp(t, "restore")
	got := dep.DeepCopy()
	env.Get(t, got)
	h := framework.TemplateHash(got)
	tmpl := framework.TemplateJSON(t, got)

	// kubectl replace sends the manifest as it is: no stamp, no record.
	env.Kubectl(t, framework.Manifest(t, dep), "replace", "-f", "-")
	env.Get(t, got)
	if framework.TemplateHash(got) != h {
		t.Fatalf("stamp after replace = %q, want %q back", framework.TemplateHash(got), h)
	}
	if framework.TemplateJSON(t, got) != tmpl {
		t.Fatalf("template changed by replace (a rollout):\n%s\n%s", tmpl, framework.TemplateJSON(t, got))
	}
	if got.Annotations[stamp.AnnotationAppliedHash] != h {
		t.Fatalf("record after replace = %q, want %q", got.Annotations[stamp.AnnotationAppliedHash], h)
	}

	// A template change through the webhook keeps the (still right) stamp.
	dep.Spec.Template.Spec.Containers[0].Image = "registry.example/app:2"
	env.Apply(t, dep)
	env.Get(t, got)
	if img := got.Spec.Template.Spec.Containers[0].Image; img != "registry.example/app:2" || framework.TemplateHash(got) != h {
		t.Fatalf("after an image change: image %s stamp %q; want app:2, %q", img, framework.TemplateHash(got), h)
	}
}

func TestDataChangePatchesTemplate(t *testing.T) {
	ns := env.Namespace(t, "change", nil)
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "app-config")
	dep := framework.Deployment(ns, "app", framework.OptIn, spec)
	env.Apply(t, framework.ConfigMap(ns, "app-config", map[string]string{"a": "1"}, nil), dep)
	got := dep.DeepCopy()
	h1 := env.WaitTemplateHash(t, got, "")

	env.Apply(t, framework.ConfigMap(ns, "app-config", map[string]string{"a": "2"}, nil))
	h2 := env.WaitTemplateHash(t, got, h1)
	if got.Annotations[stamp.AnnotationAppliedHash] != h2 {
		t.Fatalf("record %q != stamp %q", got.Annotations[stamp.AnnotationAppliedHash], h2)
	}
	env.WaitEvent(t, got, "ConfigChanged", "ConfigMap/app-config", h2)

	// The revert returns the old value, so the Deployment controller reuses the old ReplicaSet.
	env.Apply(t, framework.ConfigMap(ns, "app-config", map[string]string{"a": "1"}, nil))
	if h3 := env.WaitTemplateHash(t, got, h2); h3 != h1 {
		t.Fatalf("stamp after revert = %q, want the original %q", h3, h1)
	}
}

func TestMetadataAndUnreferencedKeyChangeNothing(t *testing.T) {
	ns := env.Namespace(t, "quiet", nil)
	spec := framework.PodSpec()
	spec.Containers[0].Env = []corev1.EnvVar{{Name: "A", ValueFrom: &corev1.EnvVarSource{
		ConfigMapKeyRef: &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: "app-config"}, Key: "a"}}}}
	dep := framework.Deployment(ns, "app", framework.OptIn, spec)
	env.Apply(t, framework.ConfigMap(ns, "app-config", map[string]string{"a": "1", "b": "1"}, nil), dep)
	got := dep.DeepCopy()
	h := env.WaitTemplateHash(t, got, "")
	tmpl := framework.TemplateJSON(t, got)

	before := env.Configstamp.ReconcileCounts(t)
	cm := framework.ConfigMap(ns, "app-config", map[string]string{"a": "1", "b": "1"}, nil)
	cm.Labels = map[string]string{"tier": "web"}
	env.Apply(t, cm) // labels only
	cm.Data["b"] = "2"
	env.Apply(t, cm) // a key nobody references
	env.Configstamp.WaitIdle(t, map[string]float64{"deployment": before["deployment"]})

	env.Get(t, got)
	if framework.TemplateJSON(t, got) != tmpl {
		t.Fatalf("template changed after metadata and unreferenced-key changes (stamp %q, was %q)", framework.TemplateHash(got), h)
	}

	cm.Data["a"] = "2" // the referenced key
	env.Apply(t, cm)
	env.WaitTemplateHash(t, got, h)
}

func TestSecretChangeRolls(t *testing.T) {
	ns := env.Namespace(t, "secret", nil)
	spec := framework.PodSpec()
	spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}}}}
	dep := framework.Deployment(ns, "app", framework.OptIn, spec)
	env.Apply(t, framework.Secret(ns, "creds", map[string]string{"password": "one"}), dep)
	got := dep.DeepCopy()
	h := env.WaitTemplateHash(t, got, "")

	env.Apply(t, framework.Secret(ns, "creds", map[string]string{"password": "two"}))
	env.WaitTemplateHash(t, got, h)
	env.WaitEvent(t, got, "ConfigChanged", "Secret/creds")
}

func TestNamespaceOptIn(t *testing.T) {
	ns := env.Namespace(t, "nsoptin", framework.OptIn)
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "app-config")
	in := framework.Deployment(ns, "in", nil, spec)
	out := framework.Deployment(ns, "out", map[string]string{stamp.LabelEnabled: "false"}, spec)
	env.Apply(t, framework.ConfigMap(ns, "app-config", map[string]string{"a": "1"}, nil), in, out)

	env.Get(t, in)
	if !strings.HasPrefix(framework.TemplateHash(in), "v1-") {
		t.Fatalf("workload in an opted-in namespace not stamped at CREATE: %q", framework.TemplateHash(in))
	}
	before := env.Configstamp.ReconcileCounts(t)
	env.Apply(t, framework.ConfigMap(ns, "app-config", map[string]string{"a": "2"}, nil))
	env.WaitTemplateHash(t, in, framework.TemplateHash(in))
	env.Configstamp.WaitIdle(t, map[string]float64{"deployment": before["deployment"]})
	env.Get(t, out)
	if h := framework.TemplateHash(out); h != "" || out.Annotations[stamp.AnnotationAppliedHash] != "" {
		t.Fatalf("opted-out workload touched: stamp %q annotations %v", h, out.Annotations)
	}
}

func TestMalformedValuesAreAdmittedWithWarningAndEvent(t *testing.T) {
	ns := env.Namespace(t, "malformed", nil)
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "app-config")
	dep := framework.Deployment(ns, "app", framework.OptIn, spec)
	dep.Annotations = map[string]string{stamp.AnnotationExtraConfigMaps: "Not_A_Name, extra"}
	stderr := env.Apply(t, framework.ConfigMap(ns, "app-config", map[string]string{"a": "1"}, nil),
		framework.ConfigMap(ns, "extra", map[string]string{"x": "1"}, nil), dep)
	if !strings.Contains(stderr, "Warning:") || !strings.Contains(stderr, "Not_A_Name") {
		t.Fatalf("kubectl printed no admission warning naming the bad value; stderr:\n%s", stderr)
	}
	got := dep.DeepCopy()
	h := env.WaitTemplateHash(t, got, "")
	env.WaitEvent(t, got, "InvalidValue", "Not_A_Name")

	// The valid name in the same list still counts.
	env.Apply(t, framework.ConfigMap(ns, "extra", map[string]string{"x": "2"}, nil))
	env.WaitTemplateHash(t, got, h)

	// A malformed opt-in label is admitted unchanged, with a warning.
	bad := framework.Deployment(ns, "bad-label", map[string]string{stamp.LabelEnabled: "yes"}, spec)
	stderr = env.Apply(t, bad)
	if !strings.Contains(stderr, "yes") {
		t.Fatalf("no admission warning for the malformed label value; stderr:\n%s", stderr)
	}
	env.WaitEvent(t, bad, "InvalidValue", "yes")

	// A malformed rollout selector on a ConfigMap: a Warning event about the
	// ConfigMap with its UID (the cache keeps none), so kubectl describe shows it.
	sel := framework.ConfigMap(ns, "bad-selector", map[string]string{"x": "1"},
		map[string]string{stamp.AnnotationRolloutSelector: "app in ("})
	env.Apply(t, sel)
	env.Get(t, sel)
	env.WaitEvent(t, sel, "InvalidValue", stamp.AnnotationRolloutSelector, "app in (")
}

func TestRolloutSelectorRecordsBaselineThenStamps(t *testing.T) {
	ns := env.Namespace(t, "selector", nil)
	spec := framework.PodSpec()
	dep := framework.Deployment(ns, "web", nil, spec) // not opted in, references nothing
	cm := framework.ConfigMap(ns, "web-config", map[string]string{"m": "hello"},
		map[string]string{stamp.AnnotationRolloutSelector: "app=web"})
	env.Apply(t, cm, dep)

	got := dep.DeepCopy()
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		env.Get(t, got)
		return got.Annotations[stamp.AnnotationAppliedHash] != "", "no baseline record yet"
	})
	if h := framework.TemplateHash(got); h != "" {
		t.Fatalf("baseline touched the template: stamp %q", h)
	}
	tmpl := framework.TemplateJSON(t, got)
	cm.Data["m"] = "changed"
	env.Apply(t, cm)
	env.WaitTemplateHash(t, got, "")
	if framework.TemplateJSON(t, got) == tmpl {
		t.Fatal("template unchanged after a data change")
	}
}

// A shared ConfigMap's change reaches every workload with one PATCH each and
// no reads: the webhook accepts the reconciler's patches on the strength of the
// source versions they carry, instead of re-reading every source.
func TestFanOutCostsOnePatchAndNoReads(t *testing.T) {
	ns := env.Namespace(t, "fanout", nil)
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "shared")
	objs := []client.Object{framework.ConfigMap(ns, "shared", map[string]string{"a": "1"}, nil)}
	var deps []*appsv1.Deployment
	for i := range 10 {
		d := framework.Deployment(ns, fmt.Sprintf("app-%d", i), framework.OptIn, spec)
		deps = append(deps, d)
		objs = append(objs, d)
	}
	env.Apply(t, objs...)
	before := env.Configstamp.ReconcileCounts(t)
	env.Kubectl(t, "", "annotate", "-n", ns, "deployment/app-0", "example.com/touched=yes")
	env.Configstamp.WaitIdle(t, map[string]float64{"deployment": before["deployment"]})
	hashes := map[string]string{}
	for _, d := range deps {
		env.Get(t, d)
		hashes[d.Name] = framework.TemplateHash(d)
	}

	gets := func() float64 {
		v, err := env.Configstamp.Metrics("rest_client_requests_total", `method="GET"`)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	patches := func() float64 {
		v, err := env.Configstamp.Metrics("rest_client_requests_total", `method="PATCH"`)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	getsBefore, patchesBefore := gets(), patches()
	before = env.Configstamp.ReconcileCounts(t)
	env.Apply(t, framework.ConfigMap(ns, "shared", map[string]string{"a": "2"}, nil))
	for _, d := range deps {
		env.WaitTemplateHash(t, d, hashes[d.Name])
	}
	env.Configstamp.WaitIdle(t, map[string]float64{"deployment": before["deployment"]})
	if n := gets() - getsBefore; n != 0 {
		t.Errorf("configstamp sent %v GET requests during a fan-out to 10 workloads, want 0", n)
	}
	if n := patches() - patchesBefore; n != 10 {
		t.Errorf("configstamp sent %v PATCH requests for 10 workloads, want 10", n)
	}
}

// The API server calls configstamp's webhook only for writes that can change
// what it decides (webhook.MayRestamp): a user's annotation of their own, like
// the Deployment controller's revision, never waits on configstamp; a label,
// and a configstamp.io/ annotation removed (the data record, which the webhook
// puts back) do reach it.
func TestOnlyWritesThatMayRestampReachTheWebhook(t *testing.T) {
	ns, dep := env.MountingApp(t, "reach")
	h := env.WaitTemplateHash(t, dep, "")
	applied := dep.Annotations[stamp.AnnotationAppliedHash]

	calls := func() float64 {
		v, err := env.Configstamp.Metrics("controller_runtime_webhook_requests_total", `webhook="`+webhook.Path+`"`)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	// The webhook calls kubectl with args caused: the API server calls a
	// webhook within the request, and the handler counts the call before it
	// answers, so the count is complete once kubectl returns.
	callsFor := func(args ...string) float64 {
		t.Helper()
		n := calls()
		env.Kubectl(t, "", append([]string{"-n", ns}, args...)...)
		return calls() - n
	}
	if n := callsFor("annotate", "deployment/app", "example.com/owner=me", "deployment.kubernetes.io/revision=7"); n != 0 {
		t.Errorf("annotations of others' reached the webhook %v times, want 0", n)
	}
	if n := callsFor("annotate", "deployment/app", stamp.AnnotationAppliedHash+"-"); n != 1 {
		t.Errorf("removing configstamp's data record reached the webhook %v times, want 1", n)
	}
	if n := callsFor("label", "deployment/app", "tier=web"); n != 1 {
		t.Errorf("a label reached the webhook %v times, want 1", n)
	}
	env.Get(t, dep)
	if framework.TemplateHash(dep) != h || dep.Annotations[stamp.AnnotationAppliedHash] != applied {
		t.Fatalf("stamp %s, data record %q; want %s and %q kept (put back by the webhook)",
			framework.TemplateHash(dep), dep.Annotations[stamp.AnnotationAppliedHash], h, applied)
	}
}
