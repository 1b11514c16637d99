package framework

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ApplyKustomize renders dir (a kustomize directory relative to the
// repository root, e.g. config/selfsigned, or an absolute path) with `kubectl kustomize` and
// applies its objects of the given kinds, the others left out: a suite
// installs an overlay's identity and RBAC without its Deployment.
func (e *Env) ApplyKustomize(ctx context.Context, dir string, kinds ...string) error {
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(e.Root, dir)
	}
	render := exec.CommandContext(ctx, "kubectl", "kustomize", dir)
	var stderr bytes.Buffer
	render.Stderr = &stderr
	out, err := render.Output()
	if err != nil {
		return fmt.Errorf("kubectl kustomize %s: %w\n%s", dir, err, stderr.String())
	}
	var items []map[string]any
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return fmt.Errorf("decoding %s: %w", dir, err)
		}
		if slices.Contains(kinds, u.GetKind()) {
			items = append(items, u.Object)
		}
	}
	list, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	if err != nil {
		return err
	}
	if _, stderr, err := e.KubectlErr(string(list), "apply", "-f", "-"); err != nil {
		return fmt.Errorf("applying %s (%v): %w\n%s", dir, kinds, err, stderr)
	}
	return nil
}

// ServiceAccountToken returns a one-hour token of the ServiceAccount
// namespace/name from the TokenRequest API.
func (e *Env) ServiceAccountToken(ctx context.Context, namespace, name string) (string, error) {
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		return "", err
	}
	tr, err := cs.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](3600)}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token for %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}

// ServiceAccountKubeconfig writes a kubeconfig for the env's API server whose
// only credential is a token of the ServiceAccount namespace/name (no client
// certificate), as a pod running under it would have, and returns its path.
func (e *Env) ServiceAccountKubeconfig(ctx context.Context, namespace, name string) (string, error) {
	token, err := e.ServiceAccountToken(ctx, namespace, name)
	if err != nil {
		return "", err
	}
	caData := e.Config.CAData
	if len(caData) == 0 && e.Config.CAFile != "" {
		if caData, err = os.ReadFile(e.Config.CAFile); err != nil {
			return "", err
		}
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["local"] = &clientcmdapi.Cluster{Server: e.Config.Host, CertificateAuthorityData: caData}
	kc.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts[name] = &clientcmdapi.Context{Cluster: "local", AuthInfo: name}
	kc.CurrentContext = name
	path := filepath.Join(e.CP.Dir, "sa-"+namespace+"-"+name+".kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return "", fmt.Errorf("writing the kubeconfig of %s/%s: %w", namespace, name, err)
	}
	return path, nil
}

// InstallKinds are the objects of an overlay a suite installs to run
// configstamp as a local process under the overlay's identity: the identity
// and what it may do, and the MutatingWebhookConfiguration (self mode may only
// get, update and patch it by name, so it must exist first). Not the
// Deployment, Service or PodDisruptionBudget.
var InstallKinds = []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
	"MutatingWebhookConfiguration"}

// InstallWithComponents applies InstallKinds of overlay (e.g.
// config/selfsigned) with components added the way their kustomizations say
// (e.g. ../components/pin), in a copy of config/, and returns a kubeconfig
// whose only credential is a token of the overlay's ServiceAccount
// serviceAccount in configstamp's namespace.
func (e *Env) InstallWithComponents(ctx context.Context, overlay, serviceAccount string, components ...string) (string, error) {
	dir, err := os.MkdirTemp("", "configstamp-config-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	overlayDir, err := e.ConfigWithComponents(dir, overlay, components...)
	if err != nil {
		return "", err
	}
	if err := e.ApplyKustomize(ctx, overlayDir, InstallKinds...); err != nil {
		return "", err
	}
	return e.ServiceAccountKubeconfig(ctx, OwnNamespace, serviceAccount)
}

// ConfigWithComponents copies config/ into dir and adds components to
// overlay's kustomization.yaml, as the components' docs tell a user to, and
// returns the copy's overlay directory.
func (e *Env) ConfigWithComponents(dir, overlay string, components ...string) (string, error) {
	if out, err := exec.Command("cp", "-r", filepath.Join(e.Root, "config"), dir).CombinedOutput(); err != nil {
		return "", fmt.Errorf("copying config/: %w\n%s", err, out)
	}
	kust := filepath.Join(dir, overlay, "kustomization.yaml")
	data, err := os.ReadFile(kust)
	if err != nil {
		return "", err
	}
	data = append(data, "\ncomponents:\n"...)
	for _, c := range components {
		data = append(data, "  - "+c+"\n"...)
	}
	if err := os.WriteFile(kust, data, 0o644); err != nil {
		return "", err
	}
	return filepath.Join(dir, overlay), nil
}

// Tenant creates the ServiceAccount "tenant" in ns bound to the `edit`
// ClusterRole there, and returns a kubeconfig whose only credential is its
// token. It checks that the identity really is a tenant: it edits
// Deployments there, and reads nothing of configstamp's namespace.
func (e *Env) Tenant(t testing.TB, ns string) string {
	t.Helper()
	ctx := t.Context()
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant"}}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tenant-edit"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: "tenant"}},
	}
	for _, o := range []client.Object{sa, rb} {
		if err := e.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	kc, err := e.ServiceAccountKubeconfig(ctx, ns, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	can := func(args ...string) string {
		out, _ := exec.Command("kubectl", append([]string{"--kubeconfig", kc, "auth", "can-i"}, args...)...).Output()
		return strings.TrimSpace(string(out))
	}
	Eventually(t, 30*time.Second, func() (bool, string) {
		out := can("patch", "deployments", "-n", ns)
		return out == "yes", "the tenant cannot patch Deployments yet (edit aggregation): " + out
	})
	if out := can("get", "secrets", "-n", OwnNamespace); out != "no" {
		t.Fatalf("the tenant can read configstamp's Secrets (%q): the test would prove nothing", out)
	}
	return kc
}
