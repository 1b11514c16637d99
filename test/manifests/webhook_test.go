package manifests

import (
	"os"
	"path/filepath"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"sigs.k8s.io/yaml"

	"github.com/configstamp/configstamp/webhook"
)

// TestWebhookManifestMatchesConfiguration keeps the hand-written
// config/webhook/manifests.yaml and webhook.Configuration() (what self mode
// registers) from drifting apart: the whole webhooks list (rules, selectors,
// policies, timeouts, client config) and the labels must be equal.
func TestWebhookManifestMatchesConfiguration(t *testing.T) {
	t.Run("config/webhook", func(t *testing.T) {
		// The base, before an overlay sets the namespace and the name prefix.
		data, err := os.ReadFile(filepath.Join(repoRoot(t), "config", "webhook", "manifests.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		objs := decodeAll(t, data)
		if len(objs) != 1 || objs[0].GetKind() != "MutatingWebhookConfiguration" {
			t.Fatalf("config/webhook/manifests.yaml: want exactly one MutatingWebhookConfiguration, got %d objects", len(objs))
		}
		got := typed[admissionregistrationv1.MutatingWebhookConfiguration](t, objs[0])
		compareWebhooks(t, got, webhook.Configuration(got.Name, "system", serviceConfig("system", "webhook-service"), nil))
	})
	for name, tc := range overlays {
		t.Run(name, func(t *testing.T) {
			r := kustomize(t, tc.dir)
			got := getAs[admissionregistrationv1.MutatingWebhookConfiguration](t, r, "MutatingWebhookConfiguration", mwcName)
			// What the binary itself computes from its flags and namespace
			// (cmd/main.go): in self mode this is what it writes over the
			// shipped object, so the two must already agree.
			args := getAs[appsv1.Deployment](t, r, "Deployment", deployment).Spec.Template.Spec.Containers[0].Args
			name, ok := argValue(args, "webhook-config-name")
			if !ok {
				name = mwcName
			}
			svc := webhookService
			if v, ok := argValue(args, "webhook-service"); ok {
				svc = v
			}
			compareWebhooks(t, got, webhook.Configuration(name, ownNamespace, serviceConfig(ownNamespace, svc), nil))
		})
	}
}

func serviceConfig(namespace, name string) admissionregistrationv1.WebhookClientConfig {
	path := webhook.Path
	return admissionregistrationv1.WebhookClientConfig{
		Service: &admissionregistrationv1.ServiceReference{Namespace: namespace, Name: name, Path: &path},
	}
}

func compareWebhooks(t *testing.T, got, want *admissionregistrationv1.MutatingWebhookConfiguration) {
	t.Helper()
	if got.Name != want.Name {
		t.Errorf("name = %q, want %q", got.Name, want.Name)
	}
	// Self mode adds the labels of webhook.Configuration that the object lacks
	// (webhook.Register) and changes no other: the shipped object must lack
	// none, or each start would change what `kubectl apply` wrote.
	for k := range want.Labels {
		if _, ok := got.Labels[k]; !ok {
			t.Errorf("labels = %v lack %s (webhook.Configuration sets it; self mode would add it)", got.Labels, k)
		}
	}
	if !equality.Semantic.DeepEqual(got.Webhooks, want.Webhooks) {
		g, _ := yaml.Marshal(got.Webhooks)
		w, _ := yaml.Marshal(want.Webhooks)
		t.Errorf("webhooks differ from webhook.Configuration():\n--- manifest\n%s\n--- webhook.Configuration()\n%s", g, w)
	}
}
