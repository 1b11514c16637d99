// Package e2e runs configstamp (the real binary) against a full local control
// plane: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok
// playing the kubelet, so ReplicaSets, ControllerRevisions and pods are real.
// Manifests go in with kubectl apply, as a user's would.
package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/configstamp/configstamp/controllers/stamp"
	"github.com/configstamp/configstamp/test/framework"
)

var env *framework.Env

func TestMain(m *testing.M) {
	os.Exit(framework.Main(m, &env, framework.Config{Plane: framework.Kwok}))
}

// replicaSets returns the ReplicaSets of Deployment name (pods labelled app=name).
func replicaSets(t *testing.T, ns, name string) []appsv1.ReplicaSet {
	return env.ReplicaSets(t, ns, name)
}

func revisions(t *testing.T, ns, owner string) int { return env.Revisions(t, ns, owner) }

// waitDeploymentRolledOut polls until the Deployment's rollout is complete:
// observed, every replica updated and available, no old pods left.
func waitDeploymentRolledOut(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	framework.Eventually(t, 90*time.Second, func() (bool, string) {
		env.Get(t, d)
		s, want := d.Status, *d.Spec.Replicas
		return framework.RolledOut(d), fmt.Sprintf("deployment %s: generation %d observed %d, replicas %d updated %d available %d (want %d)",
			d.Name, d.Generation, s.ObservedGeneration, s.Replicas, s.UpdatedReplicas, s.AvailableReplicas, want)
	})
}

func waitStatefulSetRolledOut(t *testing.T, s *appsv1.StatefulSet) {
	env.WaitStatefulSetRolledOut(t, s)
}

func waitDaemonSetRolledOut(t *testing.T, d *appsv1.DaemonSet) {
	t.Helper()
	framework.Eventually(t, 90*time.Second, func() (bool, string) {
		env.Get(t, d)
		st := d.Status
		ok := st.ObservedGeneration >= d.Generation && st.DesiredNumberScheduled > 0 &&
			st.UpdatedNumberScheduled == st.DesiredNumberScheduled && st.NumberAvailable == st.DesiredNumberScheduled &&
			st.CurrentNumberScheduled == st.DesiredNumberScheduled
		return ok, fmt.Sprintf("daemonset %s: %+v", d.Name, st)
	})
}

func TestDeploymentRollsOncePerChange(t *testing.T) {
	ns, dep := env.MountingApp(t, "deploy")
	waitDeploymentRolledOut(t, dep)
	h1 := framework.TemplateHash(dep)
	if rs := replicaSets(t, ns, "app"); len(rs) != 1 {
		t.Fatalf("ReplicaSets after creating an opted-in Deployment: %d, want exactly 1", len(rs))
	}

	env.Apply(t, framework.ConfigMap(ns, "app-config", map[string]string{"a": "2"}, nil))
	h2 := env.WaitTemplateHash(t, dep, h1)
	waitDeploymentRolledOut(t, dep)
	rs := replicaSets(t, ns, "app")
	if len(rs) != 2 {
		t.Fatalf("ReplicaSets after one data change: %d, want exactly 2", len(rs))
	}
	for _, r := range rs {
		current := r.Spec.Template.Annotations[stamp.AnnotationHash] == h2
		if current != (*r.Spec.Replicas == 1) {
			t.Errorf("ReplicaSet %s (stamp %s) has %d replicas", r.Name, r.Spec.Template.Annotations[stamp.AnnotationHash], *r.Spec.Replicas)
		}
	}
	env.WaitEvent(t, dep, "ConfigChanged", "ConfigMap/app-config")
}

func TestRestartCausesNoRollout(t *testing.T) {
	ns := env.Namespace(t, "restart", nil)
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "app-config")
	dep := framework.Deployment(ns, "app", framework.OptIn, spec)
	plain := framework.Deployment(ns, "baseline-only", nil, spec) // matched by a selector, never stamped
	env.Apply(t, framework.ConfigMap(ns, "app-config", map[string]string{"a": "1"},
		map[string]string{stamp.AnnotationRolloutSelector: "app=baseline-only"}), dep, plain)
	waitDeploymentRolledOut(t, dep)
	waitDeploymentRolledOut(t, plain)
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		env.Get(t, plain)
		return plain.Annotations[stamp.AnnotationAppliedHash] != "", "no baseline recorded"
	})
	tmplDep, tmplPlain := framework.TemplateJSON(t, dep), framework.TemplateJSON(t, plain)

	if err := env.Configstamp.Restart(t.Context()); err != nil {
		t.Fatal(err)
	}
	// A fresh process: every workload is reconciled once from the initial list.
	// WaitIdle also waits for the scheduler to hold nothing pending, so a
	// rollout decided after the restart (debounced 2 s by default) would have
	// been stamped before the templates are compared.
	env.Configstamp.WaitIdle(t, map[string]float64{"deployment": 0})
	if started, err := env.Configstamp.Metrics("configstamp_rollouts_started_total"); err != nil || started != 0 {
		t.Fatalf("the restarted process started %v rollouts (%v), want 0", started, err)
	}

	env.Get(t, dep)
	env.Get(t, plain)
	if framework.TemplateJSON(t, dep) != tmplDep || framework.TemplateJSON(t, plain) != tmplPlain {
		t.Fatal("restart changed a pod template")
	}
	if n, m := len(replicaSets(t, ns, "app")), len(replicaSets(t, ns, "baseline-only")); n != 1 || m != 1 {
		t.Fatalf("ReplicaSets after restart: %d and %d, want 1 and 1", n, m)
	}
}

func TestStatefulSetAndDaemonSetRollOncePerChange(t *testing.T) {
	ns := env.Namespace(t, "sts-ds", nil)
	spec := framework.PodSpec()
	framework.MountConfigMap(&spec, "shared")
	sts := framework.StatefulSet(ns, "db", framework.OptIn, spec)
	ds := framework.DaemonSet(ns, "agent", framework.OptIn, spec)
	env.Apply(t, framework.ConfigMap(ns, "shared", map[string]string{"a": "1"}, nil), sts, ds)
	waitStatefulSetRolledOut(t, sts)
	waitDaemonSetRolledOut(t, ds)
	if a, b := revisions(t, ns, "db"), revisions(t, ns, "agent"); a != 1 || b != 1 {
		t.Fatalf("ControllerRevisions after creation: statefulset %d, daemonset %d; want 1 and 1", a, b)
	}
	hs, hd := framework.TemplateHash(sts), framework.TemplateHash(ds)

	env.Apply(t, framework.ConfigMap(ns, "shared", map[string]string{"a": "2"}, nil))
	env.WaitTemplateHash(t, sts, hs)
	env.WaitTemplateHash(t, ds, hd)
	waitStatefulSetRolledOut(t, sts)
	waitDaemonSetRolledOut(t, ds)
	if a, b := revisions(t, ns, "db"), revisions(t, ns, "agent"); a != 2 || b != 2 {
		t.Fatalf("ControllerRevisions after one change: statefulset %d, daemonset %d; want 2 and 2", a, b)
	}
}

// The ConfigMap-restart tutorial's own manifests, unchanged: the Deployment has
// no configstamp label, the ConfigMap carries magalix.com/podDeleteMatch.
func TestTutorialManifestsUnchanged(t *testing.T) {
	demo := filepath.Join(env.Root, "hack", "demo")
	env.Kubectl(t, "", "apply", "-f", filepath.Join(demo, "tutorial", "namespace.yaml"))
	env.Kubectl(t, "", "apply", "-f", filepath.Join(demo, "tutorial"))
	dep := &appsv1.Deployment{}
	dep.Namespace, dep.Name = "test-space", "frontend"
	waitDeploymentRolledOut(t, dep)
	framework.Eventually(t, 30*time.Second, func() (bool, string) {
		env.Get(t, dep)
		return dep.Annotations[stamp.AnnotationAppliedHash] != "", "no baseline recorded"
	})
	if rs := replicaSets(t, "test-space", "frontend"); len(rs) != 1 {
		t.Fatalf("ReplicaSets after applying the tutorial: %d, want 1", len(rs))
	}
	pods := &corev1.PodList{}
	if err := env.Client.List(t.Context(), pods, client.InNamespace("test-space")); err != nil || len(pods.Items) != 1 {
		t.Fatalf("pods before the change: %d (%v), want 1", len(pods.Items), err)
	}
	oldPod := pods.Items[0].Name

	env.Kubectl(t, "", "apply", "-f", filepath.Join(demo, "configmap-changed.yaml"))
	env.WaitTemplateHash(t, dep, "")
	waitDeploymentRolledOut(t, dep)
	if rs := replicaSets(t, "test-space", "frontend"); len(rs) != 2 {
		t.Fatalf("ReplicaSets after one change: %d, want exactly 2", len(rs))
	}
	framework.Eventually(t, 60*time.Second, func() (bool, string) {
		if err := env.Client.List(t.Context(), pods, client.InNamespace("test-space")); err != nil {
			return false, err.Error()
		}
		for _, p := range pods.Items {
			if p.Name == oldPod {
				return false, "old pod " + oldPod + " still present"
			}
		}
		return len(pods.Items) == 1, fmt.Sprintf("%d pods", len(pods.Items))
	})
	// The old pod went away through the rolling update; configstamp itself sent no DELETE at all.
	deletes, err := env.Configstamp.Metrics("rest_client_requests_total", `method="DELETE"`)
	if err != nil {
		t.Fatal(err)
	}
	if deletes != 0 {
		t.Fatalf("configstamp sent %v DELETE requests, want 0", deletes)
	}
}
