// Package namespaced runs configstamp under exactly the identity
// config/namespaced installs: its ServiceAccount with a Role in each watched
// namespace (example-a, example-b), Roles in its own namespace and the few
// cluster-scoped grants (Namespaces read, its webhook configuration), with a
// token from the TokenRequest API and --watch-namespaces as the overlay passes
// it. configstamp stamps and rolls in a watched namespace with no Forbidden in
// its log, and real requests outside the watched namespaces are refused.
package namespaced

import (
	"context"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

const (
	serviceAccount = "configstamp-controller-manager"
	mwcName        = "configstamp-mutating-webhook-configuration"
)

// watched are the namespaces config/namespaced ships (namespaces/example-*).
var watched = []string{"example-a", "example-b"}

var (
	env *framework.Env
	sa  kubernetes.Interface
)

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, &env, framework.Config{
		Prepare: installRBAC,
		Args: []string{
			"--webhook-config-name=" + mwcName, "--tls-secret=configstamp-webhook-tls",
			"--watch-namespaces=" + strings.Join(watched, ","),
			"--max-concurrent-rollouts=0", "--halt-on-failure=false", "--debounce=0",
		},
	}))
}

var installKinds = []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "MutatingWebhookConfiguration"}

// installRBAC creates the watched namespaces, applies the overlay's identity
// and webhook configuration, and returns a kubeconfig with only the
// ServiceAccount's token.
func installRBAC(ctx context.Context, e *framework.Env) (string, error) {
	for _, ns := range watched {
		if err := e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			return "", err
		}
	}
	if err := e.ApplyKustomize(ctx, "config/namespaced", installKinds...); err != nil {
		return "", err
	}
	path, err := e.ServiceAccountKubeconfig(ctx, framework.OwnNamespace, serviceAccount)
	if err != nil {
		return "", err
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return "", err
	}
	if sa, err = kubernetes.NewForConfig(restCfg); err != nil {
		return "", err
	}
	return path, nil
}

// TestWorksUnderNamespacedRBAC: stamped at CREATE (the webhook's live reads)
// and re-stamped after a ConfigMap change (watches in the namespace, patch,
// events), with nothing configstamp asked for refused.
func TestWorksUnderNamespacedRBAC(t *testing.T) {
	ns := watched[0]
	dep := env.App(t, ns)
	h1 := framework.TemplateHash(dep)
	if !strings.HasPrefix(h1, "v1-") {
		t.Fatalf("not stamped at CREATE under the namespaced RBAC: %q", h1)
	}
	env.Apply(t, framework.ConfigMap(ns, "app-config", map[string]string{"a": "2"}, nil))
	got := dep.DeepCopy()
	h2 := env.WaitTemplateHash(t, got, h1)
	if got.Annotations[stamp.AnnotationAppliedHash] != h2 {
		t.Fatalf("record %q != stamp %q", got.Annotations[stamp.AnnotationAppliedHash], h2)
	}
	env.WaitEvent(t, got, "ConfigChanged", "ConfigMap/app-config", h2)
	env.Configstamp.AssertNoneRefused(t, "the namespaced RBAC")
}

// TestDeniedOutsideWatched: real requests as configstamp's ServiceAccount.
func TestDeniedOutsideWatched(t *testing.T) {
	ctx := t.Context()
	other := env.Namespace(t, "unwatched", nil)
	if err := env.Client.Create(ctx, framework.ConfigMap(other, "data", map[string]string{"a": "1"}, nil)); err != nil {
		t.Fatal(err)
	}
	spec := framework.PodSpec()
	if err := env.Client.Create(ctx, framework.Deployment(other, "app", framework.OptIn, spec)); err != nil {
		t.Fatal(err)
	}
	denied := map[string]error{}
	_, denied["list ConfigMaps cluster-wide"] = sa.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{})
	_, denied["list Secrets cluster-wide"] = sa.CoreV1().Secrets("").List(ctx, metav1.ListOptions{})
	_, denied["watch Secrets cluster-wide"] = sa.CoreV1().Secrets("").Watch(ctx, metav1.ListOptions{})
	_, denied["list Deployments cluster-wide"] = sa.AppsV1().Deployments("").List(ctx, metav1.ListOptions{})
	_, denied["get a ConfigMap in "+other] = sa.CoreV1().ConfigMaps(other).Get(ctx, "data", metav1.GetOptions{})
	_, denied["list Secrets in "+other] = sa.CoreV1().Secrets(other).List(ctx, metav1.ListOptions{})
	_, denied["list Secrets in kube-system"] = sa.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
	_, denied["patch a Deployment in "+other] = sa.AppsV1().Deployments(other).Patch(ctx, "app", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"x":"y"}}}`), metav1.PatchOptions{})
	_, denied["create a ConfigMap in "+watched[0]] = sa.CoreV1().ConfigMaps(watched[0]).Create(ctx,
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{})
	denied["delete pods in "+watched[0]] = sa.CoreV1().Pods(watched[0]).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	_, denied["create a Secret in "+watched[1]] = sa.CoreV1().Secrets(watched[1]).Create(ctx,
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "probe"}}, metav1.CreateOptions{})
	for what, err := range denied {
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s as configstamp: %v, want Forbidden", what, err)
		}
	}
	allowed := map[string]error{}
	for _, ns := range watched {
		_, allowed["list ConfigMaps in "+ns] = sa.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		_, allowed["list Secrets in "+ns] = sa.CoreV1().Secrets(ns).List(ctx, metav1.ListOptions{})
	}
	_, allowed["list Namespaces"] = sa.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	for what, err := range allowed {
		if err != nil {
			t.Errorf("%s as configstamp: %v, want allowed", what, err)
		}
	}
	t.Logf("%d requests as configstamp refused (Forbidden), %d allowed, as the namespaced RBAC says", len(denied), len(allowed))
}
