package e2e

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

const keySecret = "configstamp-hash-key"

// keyWave creates n opted-in Deployments sharing a ConfigMap and a Secret.
func keyWave(t *testing.T, ns string, n int) []*appsv1.Deployment {
	t.Helper()
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "shared")
	spec.Containers[0].EnvFrom = []corev1.EnvFromSource{{SecretRef: &corev1.SecretEnvSource{
		LocalObjectReference: corev1.LocalObjectReference{Name: "creds"}}}}
	objs := []client.Object{framework.ConfigMap(ns, "shared", map[string]string{"v": "1"}, nil),
		framework.Secret(ns, "creds", map[string]string{"token": "t1"})}
	var deps []*appsv1.Deployment
	for i := 0; i < n; i++ {
		d := framework.Deployment(ns, fmt.Sprintf("app-%02d", i), framework.OptIn, spec)
		deps = append(deps, d)
		objs = append(objs, d)
	}
	env.Apply(t, objs...)
	for _, d := range deps {
		waitDeploymentRolledOut(t, d)
	}
	return deps
}

func countReplicaSets(t *testing.T, deps []*appsv1.Deployment) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, d := range deps {
		out[d.Name] = len(replicaSets(t, d.Namespace, d.Name))
	}
	return out
}

// waitKeyID waits until every Deployment's record names the key in the Secret.
func waitKeyID(t *testing.T, deps []*appsv1.Deployment, keyID string) {
	t.Helper()
	framework.Eventually(t, time.Minute, func() (bool, string) {
		for _, d := range deps {
			env.Get(t, d)
			if got := d.Annotations[stamp.AnnotationKeyID]; got != keyID {
				return false, fmt.Sprintf("%s records key %q, want %q", d.Name, got, keyID)
			}
		}
		return true, ""
	})
}

func currentKeyID(t *testing.T) string {
	t.Helper()
	s := &corev1.Secret{}
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		err := env.Client.Get(t.Context(), client.ObjectKey{Namespace: framework.OwnNamespace, Name: keySecret}, s)
		return err == nil, fmt.Sprintf("reading the key secret: %v", err)
	})
	return stamp.NewHasher(s.Data["key"]).KeyID()
}

// The installation key's lifecycle never rolls anything: a deleted key
// Secret while one of two replicas is killed and restarted, the key lost while
// nothing ran, and a deliberate rotation. After each, a data change still
// rolls every workload exactly once.
func TestHashKeyLifecycleRollsNothing(t *testing.T) {
	ns := env.Namespace(t, "hashkey", nil)
	deps := keyWave(t, ns, 10)
	rolls := 1 // ReplicaSets each Deployment should have
	check := func(when string) {
		t.Helper()
		env.Configstamp.WaitIdle(t, map[string]float64{"deployment": 0})
		for name, n := range countReplicaSets(t, deps) {
			if n != rolls {
				t.Errorf("%s: %s has %d ReplicaSets, want %d", when, name, n, rolls)
			}
		}
	}
	change := func(v string) {
		t.Helper()
		env.Apply(t, framework.ConfigMap(ns, "shared", map[string]string{"v": v}, nil))
		rolls++
		framework.Eventually(t, 3*time.Minute, func() (bool, string) {
			for name, n := range countReplicaSets(t, deps) {
				if n < rolls {
					return false, fmt.Sprintf("%s has %d ReplicaSets, waiting for %d", name, n, rolls)
				}
			}
			return true, ""
		})
		for _, d := range deps {
			waitDeploymentRolledOut(t, d)
		}
		check("after the change to " + v)
	}

	// 1. Two replicas; the key Secret is deleted and one replica is killed
	// and restarted.
	second, err := env.StartConfigstamp(t.Context(), filepath.Join(t.TempDir(), "second.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(second.Stop)
	key1 := currentKeyID(t)
	env.Kubectl(t, "", "-n", framework.OwnNamespace, "delete", "secret", keySecret)
	second.Kill()
	if err := second.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := currentKeyID(t); got != key1 {
		t.Errorf("the key Secret came back with key %s, want the running replica's %s", got, key1)
	}
	check("after the key Secret was deleted and a replica restarted")
	change("2")
	second.Stop()

	// 2. The key lost while nothing ran: a new key, a re-baseline, no rollout.
	env.Configstamp.Stop()
	env.Kubectl(t, "", "-n", framework.OwnNamespace, "delete", "secret", keySecret)
	if err := env.Configstamp.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	key2 := currentKeyID(t)
	if key2 == key1 {
		t.Fatal("the key did not change although its Secret was gone while nothing ran")
	}
	waitKeyID(t, deps, key2)
	check("after the key was lost while nothing ran")
	change("3")

	// 3. A deliberate rotation: a new key in the Secret.
	manifest, _ := env.Kubectl(t, "", "-n", framework.OwnNamespace, "create", "secret", "generic", keySecret,
		"--from-literal=key=a-deliberately-rotated-hash-key-0123456789", "--dry-run=client", "-o", "yaml")
	env.Kubectl(t, manifest, "apply", "-f", "-")
	key3 := stamp.NewHasher([]byte("a-deliberately-rotated-hash-key-0123456789")).KeyID()
	waitKeyID(t, deps, key3)
	check("after a deliberate key rotation")
	change("4")
}
