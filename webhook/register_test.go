package webhook

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/configstamp/configstamp/controllers/workload/kindstest"
)

// TestRegisterKeepsLabels: Register replaces the webhooks but only adds the
// labels an existing configuration lacks, so the labels `kubectl apply` wrote
// (app.kubernetes.io/managed-by: kustomize, part-of, ...) survive every start.
func TestRegisterKeepsLabels(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	want := Configuration("configstamp-mutating-webhook-configuration", "configstamp-system",
		admissionregistrationv1.WebhookClientConfig{URL: new("https://127.0.0.1:9443" + Path)}, nil)
	for name, tc := range map[string]struct {
		existing   map[string]string // nil: no object yet
		wantLabels map[string]string
	}{
		"created with configstamp's labels": {
			wantLabels: want.Labels,
		},
		"installed by kustomize": {
			existing: map[string]string{
				"app.kubernetes.io/name": "configstamp", "app.kubernetes.io/part-of": "configstamp",
				"app.kubernetes.io/managed-by": "kustomize", "app.kubernetes.io/component": "webhook",
			},
			wantLabels: map[string]string{
				"app.kubernetes.io/name": "configstamp", "app.kubernetes.io/part-of": "configstamp",
				"app.kubernetes.io/managed-by": "kustomize", "app.kubernetes.io/component": "webhook",
			},
		},
		"missing label added": {
			existing:   map[string]string{"team": "platform"},
			wantLabels: map[string]string{"team": "platform", "app.kubernetes.io/managed-by": "configstamp"},
		},
		"no labels": {
			existing:   map[string]string{},
			wantLabels: want.Labels,
		},
	} {
		t.Run(name, func(t *testing.T) {
			b := fake.NewClientBuilder().WithScheme(scheme)
			if tc.existing != nil {
				b = b.WithObjects(&admissionregistrationv1.MutatingWebhookConfiguration{
					ObjectMeta: metav1.ObjectMeta{Name: want.Name, Labels: tc.existing},
				})
			}
			c := b.Build()
			if err := Register(t.Context(), c, want.DeepCopy()); err != nil {
				t.Fatal(err)
			}
			got := &admissionregistrationv1.MutatingWebhookConfiguration{}
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(want), got); err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got.Labels, tc.wantLabels) {
				t.Errorf("labels = %v, want %v", got.Labels, tc.wantLabels)
			}
			if len(got.Webhooks) != len(want.Webhooks) {
				t.Errorf("%d webhooks, want %d", len(got.Webhooks), len(want.Webhooks))
			}
		})
	}
}

// TestRegisterRetriesAConflict: replicas that start together update the same
// configuration; the one whose update conflicts reads it again and retries
// instead of failing its start (seen on a real node: the second replica of
// config/selfsigned exited once with "the object has been modified").
func TestRegisterRetriesAConflict(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	want := Configuration("configstamp-mutating-webhook-configuration", "configstamp-system",
		admissionregistrationv1.WebhookClientConfig{URL: new("https://127.0.0.1:9443" + Path)}, nil)
	conflicts := 2
	c := fake.NewClientBuilder().WithScheme(scheme).
		WithObjects(&admissionregistrationv1.MutatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: want.Name}}).
		WithInterceptorFuncs(interceptor.Funcs{Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if conflicts > 0 {
				conflicts--
				return apierrors.NewConflict(admissionregistrationv1.Resource("mutatingwebhookconfigurations"), obj.GetName(), errors.New("the object has been modified"))
			}
			return c.Update(ctx, obj, opts...)
		}}).Build()
	if err := Register(t.Context(), c, want.DeepCopy()); err != nil {
		t.Fatalf("Register after two conflicts: %v", err)
	}
	got := &admissionregistrationv1.MutatingWebhookConfiguration{}
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(want), got); err != nil {
		t.Fatal(err)
	}
	if len(got.Webhooks) != len(want.Webhooks) {
		t.Errorf("%d webhooks, want %d", len(got.Webhooks), len(want.Webhooks))
	}
}

// The rules name every kind of the registry: the built-in kinds in one rule
// (they share apps/v1), then each extra kind in its own.
func TestRulesNameEveryKind(t *testing.T) {
	kinds := kindstest.Registry(t, `
kinds:
  - {group: argoproj.io, version: v1alpha1, kind: Rollout, resource: rollouts, templatePath: spec.template}
`)
	var got []string
	for _, r := range Rules(kinds) {
		got = append(got, fmt.Sprintf("%s/%s %v %v", r.APIGroups[0], r.APIVersions[0], r.Resources, r.Operations))
	}
	want := []string{"apps/v1 [deployments statefulsets daemonsets] [CREATE UPDATE]", "argoproj.io/v1alpha1 [rollouts] [CREATE UPDATE]"}
	if !slices.Equal(got, want) {
		t.Errorf("rules %q, want %q", got, want)
	}
}
