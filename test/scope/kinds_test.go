package scope

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.scope.example.com
spec:
  group: scope.example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
`

const widget = `apiVersion: scope.example.com/v1
kind: Widget
metadata:
  name: w
  namespace: widgets-1
spec:
  template:
    metadata: {labels: {app: w}}
    spec:
      containers: [{name: app, image: app:1}]
      volumes: [{name: cfg, configMap: {name: app-config}}]
`

// TestKindInstalledLaterIsTakenUp: a kind of --kinds-config whose CRD is
// installed after configstamp started is taken up without anyone restarting
// configstamp by hand: it notices (discovery, --kinds-recheck-interval), exits
// to be restarted (as the kubelet does), and then registers the kind's webhook
// rule and stamps and rolls its objects.
func TestKindInstalledLaterIsTakenUp(t *testing.T) {
	ns := namespace(t, "widgets-1", framework.OptIn)
	kinds := filepath.Join(t.TempDir(), "kinds.yaml")
	if err := os.WriteFile(kinds, []byte("kinds: [{group: scope.example.com, version: v1, kind: Widget, resource: widgets, templatePath: spec.template}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := startConfigstamp(t, "widgets", "--watch-namespaces="+ns, "--leader-election-id=configstamp-widgets",
		"--webhook-config-name=configstamp-widgets", "--hash-key-secret=configstamp-widgets-hash-key",
		"--tls-secret=configstamp-widgets-webhook-tls", "--kinds-config="+kinds, "--kinds-recheck-interval=1s")
	webhookSelector(t, "configstamp-widgets") // deleted when the test ends
	if widgetRule(t) {
		t.Fatal("the webhook has a rule for Widgets before their CRD exists")
	}
	if err := env.Client.Create(t.Context(), framework.ConfigMap(ns, "app-config", map[string]string{"a": "1"}, nil)); err != nil {
		t.Fatal(err)
	}

	installed := time.Now()
	env.Kubectl(t, widgetCRD, "apply", "-f", "-")
	t.Cleanup(func() { _, _, _ = env.KubectlErr("", "delete", "crd", "widgets.scope.example.com") })
	framework.Eventually(t, 60*time.Second, func() (bool, string) {
		return p.Exited(), "configstamp still runs without handling Widgets"
	})
	exited := time.Since(installed)
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "kind now served; restarting configstamp to handle it") {
		t.Fatalf("configstamp exited without saying why; see %s", p.LogPath)
	}
	if err := p.Start(t.Context()); err != nil { // the kubelet's restart
		t.Fatal(err)
	}
	if !widgetRule(t) {
		t.Fatal("after the restart the webhook has no rule for Widgets")
	}
	env.Kubectl(t, widget, "apply", "-f", "-")
	w := &unstructured.Unstructured{}
	w.SetAPIVersion("scope.example.com/v1")
	w.SetKind("Widget")
	w.SetNamespace(ns)
	w.SetName("w")
	env.Get(t, w)
	h0 := framework.TemplateHash(w)
	if !strings.HasPrefix(h0, "v1-") || w.GetAnnotations()[stamp.AnnotationAppliedHash] != h0 {
		t.Fatalf("the Widget created after the restart is stamped %q (record %q)", h0, w.GetAnnotations()[stamp.AnnotationAppliedHash])
	}
	changeConfig(t, ns, "2")
	h1 := env.WaitTemplateHash(t, w, h0)
	t.Logf("configstamp exited %v after the Widget CRD was installed; after its restart a Widget was stamped (%s) and rolled (%s)",
		exited.Round(time.Millisecond), h0, h1)
}

// widgetRule reports whether the installation's webhook configuration sends
// Widget writes to configstamp.
func widgetRule(t *testing.T) bool {
	t.Helper()
	mwc := &admissionregistrationv1.MutatingWebhookConfiguration{}
	mwc.Name = "configstamp-widgets"
	env.Get(t, mwc)
	for _, r := range mwc.Webhooks[0].Rules {
		if slices.Contains(r.APIGroups, "scope.example.com") && slices.Contains(r.Resources, "widgets") {
			return true
		}
	}
	return false
}
