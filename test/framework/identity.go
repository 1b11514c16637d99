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

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/utils/ptr"
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
