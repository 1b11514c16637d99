package integration

// The cost bounds against a real kube-apiserver: what one admission may read
// (kube-apiserver's audit log counts configstamp's GETs) and that hostile
// ConfigMaps (100,000s of keys, 1 MiB of data under a user-set "digested"
// annotation) neither take the process down nor make the webhook and the
// reconciler disagree. They share the suite's control plane (TestMain in
// stamp_test.go): the same kind, etcd and kube-apiserver only.

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

// auditGets returns the names of the ConfigMaps in namespace that configstamp
// read with GET, one entry a request.
func auditGets(t *testing.T, namespace string) []string {
	t.Helper()
	var out []string
	for _, ev := range env.AuditEvents(t) {
		if ev.Stage == "ResponseComplete" && ev.Verb == "get" && strings.HasPrefix(ev.UserAgent, "configstamp") &&
			ev.ObjectRef.Resource == "configmaps" && ev.ObjectRef.Namespace == namespace {
			out = append(out, ev.ObjectRef.Name)
		}
	}
	return out
}

// workloadWrites counts configstamp's PATCHes and UPDATEs of Deployment name
// in namespace.
func workloadWrites(t *testing.T, namespace, name string) int {
	t.Helper()
	n := 0
	for _, ev := range env.AuditEvents(t) {
		if ev.Stage == "ResponseComplete" && (ev.Verb == "patch" || ev.Verb == "update") && strings.HasPrefix(ev.UserAgent, "configstamp") &&
			ev.ObjectRef.Resource == "deployments" && ev.ObjectRef.Namespace == namespace && ev.ObjectRef.Name == name {
			n++
		}
	}
	return n
}

func names(prefix string, n int) string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%04d", prefix, i)
	}
	return strings.Join(out, ",")
}

// TestExtraNamesBounded: a Deployment naming 2,000 extra ConfigMaps is admitted
// and stamped, with a warning, and its admission reads at most
// stamp.MaxExtraNames of them (plus the one its template mounts); a server-side
// dry run costs no more.
func TestExtraNamesBounded(t *testing.T) {
	ns := env.Namespace(t, "extra", nil)
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "app-config")
	cm := framework.ConfigMap(ns, "app-config", map[string]string{"a": "1"}, nil)
	first := framework.ConfigMap(ns, "cm-0000", map[string]string{"a": "1"}, nil)
	last := framework.ConfigMap(ns, "cm-1999", map[string]string{"a": "1"}, nil)
	env.Apply(t, cm, first, last)
	dep := framework.Deployment(ns, "app", framework.OptIn, spec)
	dep.Annotations = map[string]string{stamp.AnnotationExtraConfigMaps: names("cm", 2000)}

	_, stderr := env.Kubectl(t, framework.Manifest(t, dep), "apply", "--dry-run=server", "-f", "-")
	if !strings.Contains(stderr, "Warning:") || !strings.Contains(stderr, `"cm-0064" and every name after it are ignored`) {
		t.Fatalf("dry run: no warning about the names beyond the cap; kubectl said:\n%s", stderr)
	}
	dryRunGets := len(auditGets(t, ns))
	if stderr := env.Apply(t, dep); !strings.Contains(stderr, `"cm-0064" and every name after it are ignored: at most 64 ConfigMaps`) {
		t.Fatalf("no warning about the names beyond the cap; kubectl said:\n%s", stderr)
	}
	got := &appsv1.Deployment{}
	got.Namespace, got.Name = ns, "app"
	env.Get(t, got)
	if h := framework.TemplateHash(got); !strings.HasPrefix(h, "v1-") {
		t.Fatalf("not stamped: %q", h)
	}

	// The audit log is written as each request completes, before the
	// admission answers; poll in case the file lags.
	allowed := map[string]bool{"app-config": true}
	for i := range stamp.MaxExtraNames {
		allowed[fmt.Sprintf("cm-%04d", i)] = true
	}
	perAdmission := stamp.MaxExtraNames + 1
	var gets []string
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		gets = auditGets(t, ns)
		return len(gets) > dryRunGets, fmt.Sprintf("%d GETs after the dry run, %d now", dryRunGets, len(gets))
	})
	t.Logf("configstamp's GETs of ConfigMaps in %s: %d for the dry run, %d for the apply (cap %d an admission)", ns, dryRunGets, len(gets)-dryRunGets, perAdmission)
	if dryRunGets == 0 || dryRunGets > perAdmission || len(gets)-dryRunGets > perAdmission {
		t.Errorf("GETs per admission: dry run %d, apply %d; want 1..%d each", dryRunGets, len(gets)-dryRunGets, perAdmission)
	}
	for _, name := range gets {
		if !allowed[name] {
			t.Errorf("configstamp read ConfigMap %s, beyond the first %d names", name, stamp.MaxExtraNames)
		}
	}
	size := 0
	for k, v := range got.Annotations {
		if strings.HasPrefix(k, "configstamp.io/") && k != stamp.AnnotationExtraConfigMaps {
			size += len(k) + len(v)
		}
	}
	if size > stamp.MaxRecordBytes+1024 {
		t.Errorf("configstamp's annotations take %d bytes", size)
	}
}

// TestRecordOmittedWhenLarge: when the record of the referenced objects would
// exceed stamp.MaxRecordBytes, the workload is admitted and stamped without it,
// however long the names.
func TestRecordOmittedWhenLarge(t *testing.T) {
	ns := env.Namespace(t, "record", nil)
	long := strings.Repeat("n", 240)
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "app-config")
	dep := framework.Deployment(ns, "app", framework.OptIn, spec)
	dep.Annotations = map[string]string{
		stamp.AnnotationExtraConfigMaps: names(long, stamp.MaxExtraNames),
		stamp.AnnotationExtraSecrets:    names(long, stamp.MaxExtraNames),
	}
	env.Apply(t, dep)
	got := &appsv1.Deployment{}
	got.Namespace, got.Name = ns, "app"
	env.Get(t, got)
	if h := framework.TemplateHash(got); !strings.HasPrefix(h, "v1-") || got.Annotations[stamp.AnnotationAppliedHash] != h {
		t.Fatalf("stamp %q, record %q", h, got.Annotations[stamp.AnnotationAppliedHash])
	}
	if _, ok := got.Annotations[stamp.AnnotationSources]; ok {
		t.Errorf("a %d-byte sources annotation was written", len(got.Annotations[stamp.AnnotationSources]))
	}
	if _, ok := got.Annotations[stamp.AnnotationSourceVersions]; ok {
		t.Errorf("a source-versions annotation was written")
	}
}

// TestDigestMarkerRejected: the cache's in-memory marker is no annotation the
// API server accepts, so no object it delivers can carry it.
func TestDigestMarkerRejected(t *testing.T) {
	ns := env.Namespace(t, "marker", nil)
	cm := framework.ConfigMap(ns, "forged", map[string]string{"a": "1"}, map[string]string{stamp.AnnotationDigested: stamp.DigestedPerKey})
	if err := env.Client.Create(t.Context(), cm); !apierrors.IsInvalid(err) {
		t.Fatalf("creating a ConfigMap with %s: %v, want Invalid", stamp.AnnotationDigested, err)
	}
}

// hostileKeys returns n keys of short values: about 14 bytes a key in JSON.
func hostileKeys(n int) map[string]string {
	out := make(map[string]string, n)
	for i := range n {
		out[fmt.Sprintf("k%06d", i)] = fmt.Sprint(i % 10)
	}
	return out
}

// TestHostileSourcesCached: ConfigMaps with tens of thousands of keys and large
// ConfigMaps carrying a user-set configstamp.io/digested annotation are cached
// within bounds (unit tests in controllers/stamp; make bench measures the heap),
// configstamp stays up, and the webhook (live reads) and the reconciler (cache)
// agree on them: a key-precise reference to an over-cap object rolls on any
// change of that object, and a change of a marked object's data is seen.
func TestHostileSourcesCached(t *testing.T) {
	ns := env.Namespace(t, "hostile", nil)
	const manyKeys, many, marked = 40000, 4, 3
	big := strings.Repeat("x", 900<<10)
	for i := range many {
		cm := framework.ConfigMap(ns, fmt.Sprintf("many-%d", i), hostileKeys(manyKeys), nil)
		if err := env.Client.Create(t.Context(), cm); err != nil {
			t.Fatal(err)
		}
	}
	for i := range marked {
		cm := framework.ConfigMap(ns, fmt.Sprintf("marked-%d", i), map[string]string{"k": big, "small": "1"},
			map[string]string{"configstamp.io/digested": "sha256"})
		if err := env.Client.Create(t.Context(), cm); err != nil {
			t.Fatal(err)
		}
	}
	spec := framework.PodSpec()
	spec.Containers[0].Env = []corev1.EnvVar{
		{Name: "A", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "many-0"}, Key: "k000001"}}},
		{Name: "B", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: "marked-0"}, Key: "small"}}},
	}
	dep := framework.Deployment(ns, "app", framework.OptIn, spec)
	env.Apply(t, dep)
	env.Get(t, dep)
	stamped := framework.TemplateHash(dep)
	if !strings.HasPrefix(stamped, "v1-") {
		t.Fatalf("not stamped: %q", stamped)
	}

	// The reconciler, from its cache, agrees with the webhook's live reads: it
	// leaves the stamp alone and writes nothing (a cached digest that differed
	// would cost a write that the webhook then corrects, invisible on the stamp).
	before, writes := env.Configstamp.ReconcileCounts(t), workloadWrites(t, ns, "app")
	env.Kubectl(t, "", "annotate", "-n", ns, "deployment/app", "example.com/touched=yes")
	env.Configstamp.WaitIdle(t, map[string]float64{"deployment": before["deployment"]})
	env.Get(t, dep)
	if h := framework.TemplateHash(dep); h != stamped {
		t.Fatalf("the reconciler changed the webhook's stamp %s to %s", stamped, h)
	}
	if w := workloadWrites(t, ns, "app"); w != writes {
		t.Fatalf("configstamp wrote the Deployment %d times after an unrelated annotation: its cache disagrees with the webhook's reads", w-writes)
	}

	// A key nobody references, in an over-cap object: conservatively, a rollout.
	patch := client.RawPatch("application/merge-patch+json", []byte(`{"data":{"k000002":"changed"}}`))
	if err := env.Client.Patch(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "many-0"}}, patch); err != nil {
		t.Fatal(err)
	}
	second := env.WaitTemplateHash(t, dep, stamped)
	// The marked object's referenced key: seen, although a user marked it "digested".
	patch = client.RawPatch("application/merge-patch+json", []byte(`{"data":{"small":"2"}}`))
	if err := env.Client.Patch(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "marked-0"}}, patch); err != nil {
		t.Fatal(err)
	}
	env.WaitTemplateHash(t, dep, second)

	resp, err := http.Get("http://" + env.Configstamp.ProbeAddr + "/readyz")
	if err != nil {
		t.Fatalf("configstamp is down: %v", err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/readyz: %s", resp.Status)
	}
	if heap, err := env.Configstamp.Metrics("go_memstats_heap_inuse_bytes"); err == nil {
		t.Logf("configstamp's heap in use with %d ConfigMaps of %d keys and %d of 900 KiB marked: %.1f MiB", many, manyKeys, marked, heap/(1<<20))
	}
}

// TestTooManyReferencesReadsNothing: a Deployment whose template references
// 300 ConfigMaps (one projected volume) is admitted unstamped with a warning
// and an event, and configstamp reads none of them: one admission costs no
// reads however many references a template carries.
func TestTooManyReferencesReadsNothing(t *testing.T) {
	ns := env.Namespace(t, "refs", nil)
	env.Apply(t, framework.ConfigMap(ns, "ref-0000", map[string]string{"a": "1"}, nil))
	spec := framework.PodSpec()
	var sources []corev1.VolumeProjection
	for i := range stamp.MaxReferences + 44 {
		sources = append(sources, corev1.VolumeProjection{ConfigMap: &corev1.ConfigMapProjection{
			LocalObjectReference: corev1.LocalObjectReference{Name: fmt.Sprintf("ref-%04d", i)}}})
	}
	spec.Volumes = []corev1.Volume{{Name: "all", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: sources}}}}
	dep := framework.Deployment(ns, "app", framework.OptIn, spec)
	warnings := func() float64 {
		v, err := env.Configstamp.Metrics("configstamp_warnings_total", `reason="InvalidValue"`)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	before, reconciles := warnings(), env.Configstamp.ReconcileCounts(t)
	if stderr := env.Apply(t, dep); !strings.Contains(stderr, "references more than 256 ConfigMaps and Secrets") {
		t.Fatalf("no warning about the references beyond the cap; kubectl said:\n%s", stderr)
	}
	env.Get(t, dep)
	if h := framework.TemplateHash(dep); h != "" {
		t.Errorf("stamped %q although its references are over the cap", h)
	}
	env.WaitEvent(t, dep, "InvalidValue", "references more than 256")
	// One warning at admission, one when reconciled: no retry storm.
	env.Configstamp.WaitIdle(t, map[string]float64{"deployment": reconciles["deployment"]})
	if n := warnings() - before; n < 1 || n > 2 {
		t.Errorf("configstamp_warnings_total{reason=InvalidValue} rose by %v, want 1 or 2 (the admission and one reconcile)", n)
	}
	if gets := auditGets(t, ns); len(gets) != 0 {
		t.Errorf("configstamp read %d ConfigMaps of a template over the cap: %v", len(gets), gets[:min(len(gets), 5)])
	}
}
