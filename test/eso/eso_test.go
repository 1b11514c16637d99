// Package eso runs configstamp beside the External Secrets Operator's real
// controller: the external-secrets Go module's, built from the module proxy
// with its fake provider as the secret store (hack/external-secrets.sh), on
// the full local control plane (kube-controller-manager, scheduler, kwok).
// The operator writes the Secrets a workload reads, each ExternalSecret on its
// own refresh, as it does in a cluster. It runs in `make test-eso` (and CI),
// not in `make test`: building the operator is minutes of CPU.
package eso

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/test/framework"
)

// esoModule is the External Secrets Operator release the suite runs.
const esoModule = "github.com/external-secrets/external-secrets@v0.16.2"

var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, &env, framework.Config{
		Plane: framework.Kwok,
		// configstamp at its defaults (a 2 s debounce, the canary).
		Prepare: func(ctx context.Context, e *framework.Env) (string, error) {
			return "", startESO(ctx, e) // configstamp runs as admin here
		},
	}))
}

// startESO installs the operator's CRDs from esoModule and runs its
// controller (bin/'s, built by `make external-secrets`, or here when it is
// missing) with the admin kubeconfig.
func startESO(ctx context.Context, e *framework.Env) error {
	began := time.Now()
	dir, err := framework.ModuleSource(ctx, esoModule)
	if err != nil {
		return err
	}
	crds := filepath.Join(dir, "config", "crds", "bases")
	for _, crd := range []string{"secretstores.external-secrets.io", "externalsecrets.external-secrets.io"} {
		if err := e.ApplyCRDs(ctx, crd, "-k", crds); err != nil {
			return err
		}
	}
	bin, err := e.ControllerBinary(ctx, "external-secrets.sh", "external-secrets", strings.Split(esoModule, "@")[1])
	if err != nil {
		return err
	}
	log, err := e.StartController("external-secrets", bin, 1, func(ports []string) []string {
		return []string{"--metrics-addr=127.0.0.1:" + ports[0], "--enable-leader-election=false", "--enable-cluster-store-reconciler=false",
			"--enable-cluster-external-secret-reconciler=false", "--enable-cluster-push-secret-reconciler=false", "--enable-push-secret-reconciler=false"}
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "eso: CRDs and controller of %s up in %v (log %s)\n", esoModule, time.Since(began).Round(time.Millisecond), log)
	return nil
}

// store is a SecretStore of the operator's fake provider holding key=value
// (the store's data is its spec: editing it is a rotation in the store).
func store(ns, name, key, value string) string {
	return fmt.Sprintf(`apiVersion: external-secrets.io/v1
kind: SecretStore
metadata: {name: %s, namespace: %s}
spec:
  provider:
    fake:
      data:
      - {key: %s, value: %s}
`, name, ns, key, value)
}

// externalSecret makes the Secret name, with envKey from the store's key,
// refreshed every 2 s.
func externalSecret(ns, name, storeName, key, envKey string) string {
	return fmt.Sprintf(`apiVersion: external-secrets.io/v1
kind: ExternalSecret
metadata: {name: %[1]s, namespace: %[2]s}
spec:
  refreshInterval: 2s
  secretStoreRef: {name: %[3]s, kind: SecretStore}
  target: {name: %[1]s}
  data:
  - secretKey: %[5]s
    remoteRef: {key: %[4]s}
`, name, ns, storeName, key, envKey)
}

// secretHolds polls until the Secret name of ns, written by the operator,
// holds key=value.
func secretHolds(t *testing.T, ns, name, key, value string) {
	t.Helper()
	framework.Eventually(t, time.Minute, func() (bool, string) {
		s := &corev1.Secret{}
		s.Namespace, s.Name = ns, name
		if err := env.Client.Get(t.Context(), client.ObjectKeyFromObject(s), s); err != nil {
			return false, err.Error()
		}
		return string(s.Data[key]) == value, fmt.Sprintf("Secret %s has %s=%q, want %q", name, key, s.Data[key], value)
	})
}

// TestARotationThroughExternalSecretsRollsOnce: a user name and a password
// in a secret store, each synced to its Secret by an ExternalSecret of the
// operator. A rotation reaches the store as two writes 20 s apart (the two
// entries of one rotation, or two refreshes out of step): the operator
// writes the two Secrets as far apart. With configstamp.io/rotate-together
// naming both, nothing rolls on the first; once the second is written the
// Deployment rolls once, with both: one new ReplicaSet.
func TestARotationThroughExternalSecretsRollsOnce(t *testing.T) {
	ns := env.Namespace(t, "eso-rotation", nil)
	env.Kubectl(t, store(ns, "users", "db-user", "app-0")+"---\n"+store(ns, "passwords", "db-password", "pw-0")+"---\n"+
		externalSecret(ns, "db-user", "users", "db-user", "DB_USER")+"---\n"+externalSecret(ns, "db-password", "passwords", "db-password", "DB_PASSWORD"),
		"apply", "-f", "-")
	secretHolds(t, ns, "db-user", "DB_USER", "app-0")
	secretHolds(t, ns, "db-password", "DB_PASSWORD", "pw-0")

	dep := framework.RotatingApp(ns, 2)
	env.Apply(t, dep)
	rolledOut(t, dep)
	h0 := framework.TemplateHash(dep)

	env.Kubectl(t, store(ns, "users", "db-user", "app-1"), "apply", "-f", "-")
	secretHolds(t, ns, "db-user", "DB_USER", "app-1")
	from := time.Now()
	framework.Eventually(t, time.Minute, func() (bool, string) {
		env.Get(t, dep)
		if h := framework.TemplateHash(dep); h != h0 {
			t.Fatalf("stamped %s %v after the operator wrote half of the rotation, want no rollout before the rest", h, time.Since(from).Round(100*time.Millisecond))
		}
		return time.Since(from) > 20*time.Second, "watching the stamp"
	})
	env.Kubectl(t, store(ns, "passwords", "db-password", "pw-1"), "apply", "-f", "-")
	secretHolds(t, ns, "db-password", "DB_PASSWORD", "pw-1")
	env.WaitTemplateHash(t, dep, h0)
	rolledOut(t, dep)
	if n := len(env.ReplicaSets(t, ns, "app")); n != 2 {
		t.Fatalf("ReplicaSets after a rotation the operator wrote as two Secrets 20 s apart: %d, want 2 (exactly one new, with both)", n)
	}
}

// rolledOut polls until d is rolled out (framework.RolledOut), with a canary
// and its verification window on the way (configstamp's defaults).
func rolledOut(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	framework.Eventually(t, 3*time.Minute, func() (bool, string) {
		env.Get(t, d)
		return framework.RolledOut(d), fmt.Sprintf("deployment %s not rolled out: %+v", d.Name, d.Status)
	})
}
