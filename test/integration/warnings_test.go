// The warnings tests: with --apply-warnings, `kubectl apply` of a changed
// ConfigMap or Secret prints the warning naming exactly the workloads whose
// template stamp then changes.

package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/test/framework"
	"github.com/configstamp/configstamp/webhook"
)

// requests is how often the warning webhook was called.
func requests(t *testing.T) float64 {
	t.Helper()
	v, err := env.Configstamp.Metrics("controller_runtime_webhook_requests_total", `webhook="`+webhook.WarningsPath+`"`)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func keyRef(spec *corev1.PodSpec, kind, name, key string) {
	src := &corev1.EnvVarSource{}
	if kind == "Secret" {
		src.SecretKeyRef = &corev1.SecretKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
	} else {
		src.ConfigMapKeyRef = &corev1.ConfigMapKeySelector{LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key}
	}
	spec.Containers[0].Env = append(spec.Containers[0].Env, corev1.EnvVar{Name: strings.ToUpper(name + "_" + key), ValueFrom: src})
}

// rollsLine is the warning line kubectl printed, "" without one.
func rollsLine(stderr string) string {
	for l := range strings.SplitSeq(stderr, "\n") {
		if strings.Contains(l, "configstamp: this change rolls") {
			return strings.TrimSpace(strings.TrimPrefix(l, "Warning:"))
		}
	}
	return ""
}

func TestApplyWarnings(t *testing.T) {
	ns := env.Namespace(t, "warn", nil)
	// shared: frontend mounts every key, db reads key a, other reads key b,
	// notopted mounts it all but is not opted in.
	// keyed: keyonly reads key x. creds: frontend reads its password.
	front := framework.PodSpec()
	framework.MountConfigMap(&front, "shared")
	keyRef(&front, "Secret", "creds", "password")
	db, other, keyonly, plain := framework.PodSpec(), framework.PodSpec(), framework.PodSpec(), framework.PodSpec()
	keyRef(&db, "ConfigMap", "shared", "a")
	keyRef(&other, "ConfigMap", "shared", "b")
	keyRef(&keyonly, "ConfigMap", "keyed", "x")
	framework.MountConfigMap(&plain, "shared")
	shared := framework.ConfigMap(ns, "shared", map[string]string{"a": "1", "b": "1"}, nil)
	keyed := framework.ConfigMap(ns, "keyed", map[string]string{"x": "1", "y": "1"}, nil)
	creds := framework.Secret(ns, "creds", map[string]string{"password": "hunter2"})
	workloads := []client.Object{
		framework.Deployment(ns, "notopted", nil, plain),
		framework.Deployment(ns, "frontend", framework.OptIn, front),
		framework.StatefulSet(ns, "db", framework.OptIn, db),
		framework.Deployment(ns, "other", framework.OptIn, other),
		framework.Deployment(ns, "keyonly", framework.OptIn, keyonly),
	}
	env.Apply(t, append([]client.Object{shared, keyed, creds}, workloads...)...)
	stamps := map[string]string{}
	for _, w := range workloads {
		env.Get(t, w)
		stamps[w.GetName()] = framework.TemplateHash(w)
	}

	// The webhook reads workloads from configstamp's cache: a server-side
	// dry run (sent to validating webhooks too) shows when it has them all.
	shared.Data["a"] = "2"
	want := "configstamp: this change rolls 2 workloads: deployment/frontend, statefulset/db"
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		_, stderr := env.Kubectl(t, framework.Manifest(t, shared), "apply", "--dry-run=server", "-f", "-")
		return rollsLine(stderr) == want, "dry run warned " + stderr
	})

	// Key a changes: frontend (every key) and db (key a) roll; other (key b)
	// and notopted (not opted in) do not.
	since := env.Configstamp.ReconcileCounts(t)
	if got := rollsLine(env.Apply(t, shared)); got != want {
		t.Fatalf("kubectl apply warned %q, want %q", got, want)
	}
	rolled := map[string]bool{"frontend": true, "db": true}
	env.Configstamp.WaitIdle(t, map[string]float64{"deployment": since["deployment"], "statefulset": since["statefulset"]})
	for _, w := range workloads {
		env.Get(t, w)
		h := framework.TemplateHash(w)
		if changed := h != stamps[w.GetName()]; changed != rolled[w.GetName()] {
			t.Errorf("%s: stamp %q -> %q, rolled %v, the warning said %v", w.GetName(), stamps[w.GetName()], h, changed, rolled[w.GetName()])
		}
		stamps[w.GetName()] = h
	}

	// A key nobody references: no "rolls" warning, nothing rolls.
	keyed.Data["y"] = "2"
	n := requests(t)
	since = env.Configstamp.ReconcileCounts(t)
	if stderr := env.Apply(t, keyed); rollsLine(stderr) != "" {
		t.Fatalf("an unreferenced key's change warned: %s", stderr)
	}
	if got := requests(t); got <= n {
		t.Fatalf("the data change did not reach the webhook (%v requests before, %v after)", n, got)
	}

	// A Secret: the warning names the workload, never a value.
	creds.Data["password"] = []byte("correct-horse")
	stderr := env.Apply(t, creds)
	if got, want := rollsLine(stderr), "configstamp: this change rolls 1 workload: deployment/frontend"; got != want {
		t.Fatalf("kubectl apply of the Secret warned %q, want %q", got, want)
	}
	if strings.Contains(stderr, "hunter2") || strings.Contains(stderr, "correct-horse") || strings.Contains(stderr, "password") {
		t.Fatalf("the warning reveals Secret data: %s", stderr)
	}
	// Once frontend's Secret change is reconciled, the earlier unreferenced
	// key change has been too: keyonly did not roll, frontend did.
	env.Configstamp.WaitIdle(t, map[string]float64{"deployment": since["deployment"]})
	ko, fr := workloads[4].(*appsv1.Deployment), workloads[1].(*appsv1.Deployment)
	env.Get(t, ko)
	env.Get(t, fr)
	if framework.TemplateHash(ko) != stamps["keyonly"] {
		t.Errorf("keyonly rolled on an unreferenced key")
	}
	if framework.TemplateHash(fr) == stamps["frontend"] {
		t.Errorf("frontend did not roll on its Secret's change")
	}
	since = env.Configstamp.ReconcileCounts(t)

	// Metadata only (annotate, label, a re-apply with a new annotation):
	// matchConditions keep it away from the webhook. Then one data change,
	// the positive control: the counter moves by exactly one.
	n = requests(t)
	env.Kubectl(t, "", "annotate", "-n", ns, "configmap/shared", "example.com/touched=yes")
	env.Kubectl(t, "", "label", "-n", ns, "configmap/shared", "team=a")
	keyed.Annotations = map[string]string{"example.com/note": "metadata only"}
	if stderr := env.Apply(t, keyed); rollsLine(stderr) != "" {
		t.Fatalf("a metadata-only change warned: %s", stderr)
	}
	keyed.Data["x"] = "2"
	if got := rollsLine(env.Apply(t, keyed)); got != "configstamp: this change rolls 1 workload: deployment/keyonly" {
		t.Fatalf("the control change warned %q", got)
	}
	framework.Eventually(t, 10*time.Second, func() (bool, string) {
		got := requests(t)
		return got >= n+1, fmt.Sprintf("%v requests, want %v", got, n+1)
	})
	if got := requests(t); got != n+1 {
		t.Fatalf("webhook requests went %v -> %v over three metadata-only changes and one data change, want +1", n, got)
	}
	env.Configstamp.WaitIdle(t, map[string]float64{"deployment": since["deployment"]})
}

// Last (it leaves configstamp running without the flag): restarting without
// --apply-warnings removes the configuration.
func TestZWithoutFlagNoConfiguration(t *testing.T) {
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := env.Client.Get(t.Context(), client.ObjectKey{Name: "configstamp"}, vwc); err != nil {
		t.Fatalf("with --apply-warnings: %v", err)
	}
	if err := env.Configstamp.RestartWith(t.Context(), "--apply-warnings=false"); err != nil {
		t.Fatal(err)
	}
	// readyz is up after the configuration was registered (self mode's first check).
	err := env.Client.Get(t.Context(), client.ObjectKey{Name: "configstamp"}, vwc)
	if !apierrors.IsNotFound(err) {
		t.Fatalf("without --apply-warnings the ValidatingWebhookConfiguration is there (%v)", err)
	}
	list := &admissionregistrationv1.ValidatingWebhookConfigurationList{}
	if err := env.Client.List(t.Context(), list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Fatalf("without --apply-warnings %d ValidatingWebhookConfigurations exist", len(list.Items))
	}
}
